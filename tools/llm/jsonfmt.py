"""Compact, diffable JSON for the expected.json files: one space per level, small containers on one line."""
import json


def _finite(obj):
    """JSON has no NaN or Infinity: non-finite floats (Mamba's time_step_limit) become strings."""
    if isinstance(obj, float) and obj != obj:
        return "NaN"
    if isinstance(obj, float) and obj in (float("inf"), float("-inf")):
        return "Infinity" if obj > 0 else "-Infinity"
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj, width=110):
    return _fmt(json.loads(json.dumps(_finite(obj), allow_nan=False)), 0, width, 0) + "\n"


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
