"""``cronicorn``: the operator's command line over the REST API (``/api/v1``).

It speaks HTTP only (the standard library's ``urllib``) and imports nothing of the server:
no Django, no app (an import-linter contract says so), so it runs on a laptop with a URL
and an API key and no database credentials. ``cli.main`` is the console script.
"""
