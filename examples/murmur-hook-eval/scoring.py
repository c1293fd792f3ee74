"""Scoring for murmur-hook-eval: pure functions over plain values (unit-tested on the host).

Config = MURMUR_EVAL_CONFIG, the JSON form of observability.eval: {"dataset_id"?, "scorers": [
{"type", "name", "max"?, "expected"?}]}. Scorers:

  exit_ok        pass when exit_status == "ok"
  max_turns      pass when total_turns <= max
  max_tokens     pass when total_input_tokens + total_output_tokens <= max
  tool_sequence  pass when `expected` is a subsequence of the observed tool calls; the score is the
                 matched fraction of `expected`
  llm_judge      recognized, not implemented: emits no score (the hook logs a warning)

A config the hook cannot score against (not JSON, no scorer list, an unknown type, a missing
`max`/`expected`) is a ConfigError naming the key; the session's dataset_run then says
`overall: config_error` and carries {"key", "message"}. `overall` is `fail` when any scorer failed,
`no_scores` when none produced a score, else `pass`.
"""

import json

TYPES = ("exit_ok", "max_turns", "max_tokens", "tool_sequence", "llm_judge")


class ConfigError(Exception):
    def __init__(self, key, message):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def _kind(value):
    return {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), "a value")


def parse_scorers(config_json):
    """The scorer list of a MURMUR_EVAL_CONFIG value; ConfigError on the first bad entry."""
    try:
        config = json.loads(config_json)
    except ValueError as exc:
        raise ConfigError("MURMUR_EVAL_CONFIG", f"not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ConfigError("MURMUR_EVAL_CONFIG", f"expected a JSON object, found {_kind(config)}")
    entries = config.get("scorers")
    if not isinstance(entries, list):
        raise ConfigError("scorers", "missing or not an array")
    scorers = []
    for i, entry in enumerate(entries):
        kind = entry.get("type") if isinstance(entry, dict) else None
        if not isinstance(kind, str):
            raise ConfigError(f"scorers[{i}].type", "missing or not a string")
        if kind not in TYPES:
            raise ConfigError(f"scorers[{i}].type", f"unknown scorer type '{kind}'")
        name = entry.get("name") if isinstance(entry.get("name"), str) else kind
        scorer = {"type": kind, "name": name}
        if kind in ("max_turns", "max_tokens"):
            limit = entry.get("max")
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
                raise ConfigError(f"scorers[{i}].max", f"scorer type '{kind}' requires a numeric 'max'")
            scorer["max"] = limit
        if kind == "tool_sequence":
            expected = entry.get("expected")
            if not isinstance(expected, list) or not expected or not all(isinstance(t, str) for t in expected):
                raise ConfigError(f"scorers[{i}].expected", "scorer type 'tool_sequence' requires 'expected' "
                                                            "to be a non-empty list of tool names")
            scorer["expected"] = list(expected)
        scorers.append(scorer)
    return scorers


def tool_sequence(observed, expected):
    """(passed, score): is `expected` a subsequence of `observed`, and the matched fraction."""
    if not expected:
        return True, 1.0
    matched = 0
    for tool in observed:
        if matched < len(expected) and tool == expected[matched]:
            matched += 1
    return matched == len(expected), matched / len(expected)


def score_session(scorers, observed_tools, end, ts):
    """(event_score records, {name: score}, overall) for a finished session.

    `end` holds the session-end-event fields: total_turns, total_input_tokens,
    total_output_tokens, exit_status (snake_case)."""
    records, scores, failed = [], {}, False
    turns = int(end.get("total_turns", 0))
    tokens = int(end.get("total_input_tokens", 0)) + int(end.get("total_output_tokens", 0))
    for scorer in scorers:
        kind, name = scorer["type"], scorer["name"]
        if kind == "llm_judge":
            continue
        if kind == "exit_ok":
            status = end.get("exit_status")
            passed, score, reason = status == "ok", None, f"exit_status={status}"
        elif kind == "max_turns":
            passed, score, reason = turns <= scorer["max"], None, f"turns={turns} max={scorer['max']}"
        elif kind == "max_tokens":
            passed, score, reason = tokens <= scorer["max"], None, f"tokens={tokens} max={scorer['max']}"
        else:
            passed, score = tool_sequence(observed_tools, scorer["expected"])
            reason = f"observed={list(observed_tools)} expected={scorer['expected']}"
        score = (1.0 if passed else 0.0) if score is None else float(score)
        failed = failed or not passed
        scores[name] = score
        records.append({"record_type": "event_score", "ts": ts, "turn": turns, "event_type": "session_end",
                        "scorer": name, "result": "pass" if passed else "fail", "score": score, "reason": reason})
    overall = "fail" if failed else ("no_scores" if not scores else "pass")
    return records, scores, overall


def eval_lines(records, scores, overall, dataset_id, case_id, ts, config_error=None):
    """eval.jsonl's lines: the event_score records, then exactly one dataset_run."""
    run = {"record_type": "dataset_run", "ts": ts, "dataset_id": dataset_id, "case_id": case_id,
           "overall": overall, "scores": dict(sorted(scores.items()))}
    if config_error is not None:
        run["config_error"] = {"key": config_error.key, "message": config_error.message}
    return [json.dumps(r, separators=(",", ":")) for r in records] + [json.dumps(run, separators=(",", ":"))]
