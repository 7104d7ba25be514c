"""What adapting buys, in simulated time: scenarios of an endpoint's answers over a day,
and a simulator that runs the endpoint's schedule, run policy and planner over them
through the engine's pure parts (``bench/adaptation.py``, README "What adapting buys")."""
