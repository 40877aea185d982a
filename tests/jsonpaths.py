"""Every path into a JSON document, for tests that mutate real files one place at a time."""


def json_paths(value, prefix=()):
    """Yield `prefix` and the key/index path of every value below it, depth first."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from json_paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from json_paths(v, prefix + (i,))
