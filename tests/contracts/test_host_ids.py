"""Host token ids: ``ids_tensor`` equals ``torch.tensor`` and owns its storage."""

import pytest
import torch

from specdec.contracts.host_ids import ids_tensor

INT64 = torch.iinfo(torch.long)


@pytest.mark.parametrize(
    "ids",
    [[], [0], [3, 1, 4, 1, 5], list(range(300)), [INT64.min, -1, INT64.max]],
    ids=["empty", "one", "five", "300", "extremes"],
)
def test_ids_tensor_equals_torch_tensor(ids):
    got = ids_tensor(ids)
    assert torch.equal(got, torch.tensor(ids, dtype=torch.long)) and got.dtype == torch.long and got.shape == (len(ids),)


def test_ids_tensor_owns_its_storage():
    ids = [7, 8, 9]
    first, second = ids_tensor(ids), ids_tensor(ids)
    ids[0] = 0
    first[1] = -1
    assert first.tolist() == [7, -1, 9] and second.tolist() == [7, 8, 9]
