# The compiled record decoder's interface (_record_decoder.c), for the type checker.
from typing import Any, List

def decode_batch(buffer: bytes, base_offset: int, count: int, last_offset_delta: int, pos: int,
                 record_type: Any) -> List[Any]: ...
