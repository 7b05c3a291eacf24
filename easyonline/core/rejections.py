"""Why a sample was rejected: a kind for the counters, then the detail for the log.

No TensorFlow here: the Kafka reader process uses it too.
"""

# Why a line was rejected: every rejection reason starts with one of these kinds.
FIELD_COUNT, BAD_VALUE, INVALID_UTF8, BAD_LABEL, BAD_WEIGHT, BAD_RECORD, OVERSIZED_MESSAGE = (
    "field_count", "bad_value", "invalid_utf8", "bad_label", "bad_weight", "bad_record", "oversized_message")
# A weighted tag value that is not "id<kv_separator>number"; sequences of one attention of different lengths.
BAD_TAG_WEIGHT, BAD_SEQUENCE = "bad_tag_weight", "bad_sequence"
REJECTION_KINDS = (FIELD_COUNT, BAD_VALUE, INVALID_UTF8, BAD_LABEL, BAD_WEIGHT, BAD_RECORD, OVERSIZED_MESSAGE,
                   BAD_TAG_WEIGHT, BAD_SEQUENCE)


def rejection(kind: str, detail: str) -> str:
    """A rejection reason: ``"<kind>: <detail>"`` (counters group by the kind)."""
    return f"{kind}: {detail}"[:200]


def rejection_kind(reason: str) -> str:
    kind = reason.split(":", 1)[0]
    return kind if kind in REJECTION_KINDS else BAD_VALUE
