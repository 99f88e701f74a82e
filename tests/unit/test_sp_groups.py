"""The replica's SP regroup policy (spotlight/sp/sp_groups.py): which groups its live workers form,
and which samples of an item each group takes."""

import pytest

from spotlight.sp.sp_groups import group_shape, share_item


def test_live_workers_form_groups_of_the_degree_then_the_largest_valid_ones():
    assert group_shape(list(range(8)), 4, 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert group_shape([0, 1, 2, 4, 5, 6, 7], 4, 4) == [[0, 1, 2, 4], [5, 6], [7]]
    assert group_shape([1, 2, 3], 4, 4) == [[1, 2], [3]]  # 3 does not divide 4 heads
    assert group_shape([0, 1, 2], 4, 24) == [[0, 1, 2]]  # Qwen-Image's 24 heads: SP 3 is valid
    assert group_shape([5], 4, 4) == [[5]]
    with pytest.raises(ValueError, match="no SP workers"):
        group_shape([], 4, 4)


def test_an_item_is_shared_in_proportion_and_empty_shares_are_left_out():
    shares = share_item(10, [[0, 1], [2], [3]])
    assert [(g, (sl.start, sl.stop)) for g, sl in shares] == [
        ([0, 1], (0, 5)),
        ([2], (5, 8)),
        ([3], (8, 10)),
    ]
    shares = share_item(3, [[0], [1], [2], [3]])
    assert [g for g, _ in shares] == [[0], [1], [2]]  # the fourth group gets nothing
    samples = list(range(7))
    parts = [samples[sl] for _, sl in share_item(7, [[0, 1, 2, 3], [4, 5], [6]])]
    assert [x for part in parts for x in part] == samples  # every sample once, in order
