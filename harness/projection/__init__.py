"""Before you rent: measured rows projected to cards nobody rented, with an error band a
leave-one-card-out ledger sets (``ledger``), public measurements read in (``external``), and the
ranking, the deciding experiment and the package that fits a traffic (``rent``).

Formulas are pure and stated once (``project``); every projected figure is labelled
``projected (from CARD)`` and never enters a measured table.
"""
