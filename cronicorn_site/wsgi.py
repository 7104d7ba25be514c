from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

from cronicorn_site.startup import load_settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cronicorn_site.settings")
load_settings_or_exit()

application = get_wsgi_application()
