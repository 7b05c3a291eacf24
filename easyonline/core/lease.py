"""What a writer beside the training loop checks before each write to the stream or model_dir.

The update publisher sends from its own thread; if the trainer lost model_dir
to another trainer, every message it sends after that is a second copy of the
stream's sequence numbers (readers take whichever arrives first). So it asks
the lease before each send. The question must cost nothing per message: the
lease (``checkpoint/writer_lock.py``) answers from flags its renewal thread
keeps, never from a file read.
"""
from typing import Optional, Protocol


class ModelDirLease(Protocol):
    """``lost``: why the lease is gone for good (names the other holder), else None.
    ``held()``: the lease was confirmed recently enough that nobody can have taken it over yet."""

    lost: Optional[str]

    def held(self) -> bool:
        """True while writing is safe; False while unconfirmed (wait) or lost (stop)."""
