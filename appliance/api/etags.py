"""Conditional GETs: whether a request's If-None-Match names what the server would send,
for every answer that carries an ETag (the OpenAPI document, the console's files)."""


def etag_matches(header, etag):
    """Whether If-None-Match names this ETag (weak or strong, or `*`)."""
    for candidate in (header or "").split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == etag:
            return True
    return False
