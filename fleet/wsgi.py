import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleet.settings")
application = get_wsgi_application()

# Move everything loaded at start-up (Django, apps, URL resolvers, templates) out of the cyclic GC's
# reach: full collections no longer rescan it, which took the list page's p95 from ~33 to ~25 ms
# (bench/README.md). Gunicorn preloads nothing, so each worker does this once when it imports us.
gc.collect()
gc.freeze()
