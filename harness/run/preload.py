"""The first module a node host's forkserver imports (harness.run.host.PRELOAD): it turns the
cyclic garbage collector off for the engines' import that follows. Every collection during an
import of torch and transformers rescans all that was imported so far: with it on, the import
takes 5.7-5.9 s here, with it off 4.8-4.9 s. The forkserver only forks, so it never turns it
back on; each forked child freezes what it inherited (`gc.freeze`: never scanned again) and
turns the collector on for the group (harness.run.host.child_main). What the import left as
garbage (≈16,800 objects, ≈9 MiB here) stays in the forkserver, shared with every child alike.
Imported anywhere else, it would do the same: nothing else imports it."""

import gc

gc.disable()
