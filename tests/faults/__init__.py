"""The fault-injection suite: the fleet as real processes, faults injected, promises checked.

``world.py`` runs the fleet, ``faults.py`` lists the faults, ``analysis.py`` judges what
the target and the database saw; ``bench/faults.py`` runs the long cases.
"""
