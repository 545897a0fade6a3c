"""The web console served by the broker at ``/console/``: server-rendered pages, no build step.

Jinja2 templates, a little vendored JavaScript (htmx, uPlot) and a classless stylesheet
(simple.css), all under ``static/vendor`` with their licences and a SHA-256 manifest. The
pages read the store directly (same process) and use the API's tokens and rights
(:mod:`ingest_api.console.web`). ``install_console(app)`` adds the routes, the static files
and the security-header middleware; the app's lifespan runs :func:`samples.sampling`.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from ingest_api.console import admin, cluster, ladder, messages, pages, web


def install_console(app: FastAPI) -> None:
    app.add_middleware(web.ConsoleHeaders)
    app.mount(f"{web.PREFIX}/static", StaticFiles(directory=str(web.HERE / "static")), name="console-static")
    for module in (web, pages, messages, admin, ladder, cluster):
        app.include_router(module.router)
