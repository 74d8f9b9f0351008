"""Before you rent: measured rows projected to cards nobody rented, with an error band where a
ledger validates one (``ledger``: a band per phase, dense or MoE and vendor direction, checked
by leaving a card out; ``book``: a ledger's scope and the band it lends, or "no validated band:
measure it"), public measurements read in (``external``), and the ranking, the deciding
experiment and the package that fits a traffic (``rent``).

Formulas are pure and stated once (``project``); every projected figure is labelled
``projected (from CARD)`` and never enters a measured table.
"""
