"""Says what is wrong with a predict request's input names: every missing and every unknown name at once.

A request naming ``C55`` where the model takes ``C5`` used to be told only
``missing input(s) ['C5']``: the typo that caused it went unnamed. And a REST
"instances" row lacking an input was told ``every instance must have the same
inputs``, without the row or the input. The messages here name both sides and,
for an unknown name, the model's closest one (REST, gRPC and LoadedExport.predict).
"""
import difflib
from typing import Collection, Iterable, List, Optional


def _guesses(unknown: List[str], candidates: Collection[str]) -> str:
    """`` (did you mean 'C5'?)``, `` (did you mean 'C5' for 'C55', 'I1' for 'l1'?)``, or nothing."""
    pairs = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.5)
        if close:
            pairs.append((close[0], name))
    if not pairs:
        return ""
    if len(unknown) == 1:
        return f" (did you mean {pairs[0][0]!r}?)"
    return f" (did you mean {', '.join(f'{guess!r} for {name!r}' for guess, name in pairs)}?)"


def name_mismatch(given: Iterable[str], expected: Collection[str], optional: Collection[str] = (),
                  takes: str = "the model takes") -> Optional[str]:
    """``missing input(s) ['C5']; unknown input(s) ['C55'] (did you mean 'C5'?); the model takes [...]`` when
    ``given`` is not ``expected`` (less any of ``optional``); None when it is."""
    given = set(given)
    missing, unknown = sorted(set(expected) - given - set(optional)), sorted(given - set(expected))
    if not missing and not unknown:
        return None
    parts = [f"missing input(s) {missing}"] if missing else []
    if unknown:  # the guesses: among the names not given first (a typo of one), else any
        parts.append(f"unknown input(s) {unknown}{_guesses(unknown, sorted(set(expected) - given) or list(expected))}")
    return f"{'; '.join(parts)}; {takes} {sorted(expected)}"


def uneven_instance(rows: List[dict]) -> Optional[str]:
    """``instance 3 lacks 'C5' and has 'C55', unlike instance 0: ...`` for the first row whose inputs are not
    those of row 0; None when every row has the same."""
    names = set(rows[0])
    for i, row in enumerate(rows):
        if set(row) != names:
            lacks, extra = sorted(names - set(row)), sorted(set(row) - names)
            said = ([f"lacks {', '.join(map(repr, lacks))}"] if lacks else []) + \
                   ([f"has {', '.join(map(repr, extra))}"] if extra else [])
            return f"instance {i} {' and '.join(said)}, unlike instance 0: every instance must have the same inputs"
    return None
