"""BlobLines: a batch's lines carried as one newline-joined blob."""
import pytest

from easyonline.inputs.raw_batch import BlobLines


@pytest.mark.parametrize("blob", [b"a,1\nb,2\nc,3", b"a,1", b""])
def test_blob_lines_are_the_split_lines_and_their_count(blob):
    lines = BlobLines(blob)
    expected = blob.split(b"\n") if blob else []
    assert len(lines) == len(expected) and list(lines) == expected
    assert lines[1:] == expected[1:]


def test_a_known_count_is_not_recounted():
    assert len(BlobLines(b"a\nb\nc", 3)) == 3


@pytest.mark.parametrize("blob, empty", [(b"a\nb", False), (b"a", False), (b"", False), (b"\na", True),
                                         (b"a\n", True), (b"a\n\nb", True), (b"\n", True)])
def test_has_empty_line_matches_the_split(blob, empty):
    lines = BlobLines(blob)
    assert lines.has_empty_line() is empty
    assert (b"" in list(lines)) is empty
