"""Parsing request bodies (JSON and YAML) into plain JSON data of a bounded shape.

Whatever a body holds ends up stored and rendered with orjson, and walked by recursive code
(validation, links). So a body is refused (ShapeError) unless it is plain JSON data:
nested at most MAX_DEPTH levels (orjson renders at most 254, and a stored value is
rendered inside envelopes), integers within 64 bits, strings without lone surrogates.

YAML bodies: yaml_bodies.py (apart, so that a process that reads no YAML loads no
YAML parser).
"""

import orjson

MAX_DEPTH = 100


class ShapeError(ValueError):
    pass


def parse_json(raw):
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if "depth limit" in str(e):      # orjson's own bound, 1024 levels
            raise ShapeError(f"body is nested more than {MAX_DEPTH} levels deep") from None
        raise ShapeError(f"body is not valid JSON: {e}") from None
    check_depth(data)
    return data


def as_json_data(data):
    """YAML's extra types (dates, sets, binary, non-string keys) as what JSON would carry,
    or ShapeError when a value has no JSON form."""
    try:
        return orjson.loads(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS))
    except (orjson.JSONEncodeError, TypeError) as e:
        raise ShapeError(f"body holds a value that JSON cannot carry: {e}") from None


def check_depth(data):
    # level by level, not recursively: the point is to refuse what recursion cannot handle
    level, depth = [data], 1
    while True:
        level = [child for value in level if isinstance(value, (dict, list))
                 for child in (value.values() if isinstance(value, dict) else value)]
        if not level:
            return
        depth += 1
        if depth > MAX_DEPTH:
            raise ShapeError(f"body is nested more than {MAX_DEPTH} levels deep")
