"""The HTTP door: the FastAPI broker app, its routers, and the uvicorn server."""
