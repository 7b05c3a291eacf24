"""A user parse function for the tests: "label|user|item1,item2" lines, several items = several samples."""


def parse(line: bytes):
    label, user, items = line.decode("utf-8").split("|")
    if label not in ("0", "1"):
        raise ValueError(f"bad label {label!r}")
    return [{"label": int(label), "user": user, "item": int(item)} for item in items.split(",") if item]


def not_a_function():
    pass


NOT_CALLABLE = 3
