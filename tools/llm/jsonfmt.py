"""Compact, diffable JSON for the expected.json files: one space per level, small containers on one line."""
import json


def dumps(obj, width=110):
    return _fmt(json.loads(json.dumps(obj)), 0, width, 0) + "\n"


def _fmt(obj, level, width, key_len):
    one = json.dumps(obj, separators=(", ", ": "))
    if len(one) + level + key_len <= width or not isinstance(obj, (dict, list)) or not obj:
        return one
    pad = " " * (level + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(k)}: {_fmt(v, level + 1, width, len(json.dumps(k)) + 2)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"
    items = [pad + _fmt(v, level + 1, width, 0) for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + " " * level + "]"
