"""From result rows to what people read: ``aggregate`` (the equal-quality gate, cost per tariff
package, Pareto fronts, factor effects), ``compare`` (two runs), ``publish`` (files)."""
