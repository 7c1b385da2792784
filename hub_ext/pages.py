"""Admin pages served by the service (filled in by the admin-pages work)."""


def page_handlers(prefix: str) -> list:
    return []
