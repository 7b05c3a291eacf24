"""Parses the start times users write: "YYYYMMDD HH:MM:SS" or unix seconds."""
import datetime


def parse_offset_time(text: str) -> float:
    """Returns unix seconds; "YYYYMMDD HH:MM:SS" is read in local time."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.datetime.strptime(text, "%Y%m%d %H:%M:%S").timestamp()
    except ValueError:
        raise ValueError(f"{text!r} is neither unix seconds nor 'YYYYMMDD HH:MM:SS'") from None
