"""Hand-edited copies of an exported `.pt2`, for tests of what a reader does with them."""

import json
import zipfile


def with_model_json(src, dst, edit):
    """Copy archive `src` to `dst` with its graph JSON replaced by `edit(model)` (which may
    change the parsed JSON in place and return None)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name.endswith("models/model.json"):
                model = json.loads(data)
                data = json.dumps(edit(model) or model)
            zout.writestr(name, data)
    return dst
