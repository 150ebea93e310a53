from canvaslab.studies.batch_size.design import batch_rows, common_classes, equivalence_classes


def test_equivalence_classes_group_identical_signatures():
    assert equivalence_classes({1: "a", 2: "a", 3: "b", 4: "b"}) == [[1, 2], [3, 4]]
    assert equivalence_classes({1: "a", 2: "b", 3: "c"}) == [[1], [2], [3]]


def test_common_classes_is_the_meet_of_partitions():
    assert common_classes([[[1, 2], [3, 4]], [[1, 2, 3], [4]]]) == [[1, 2], [3], [4]]


def test_batch_rows_copies_and_mixed():
    assert batch_rows([5, 6], [[7]], 3, "copies") == [[5, 6], [5, 6], [5, 6]]
    assert batch_rows([5, 6], [[7], [8, 9]], 4, "mixed") == [[5, 6], [7], [8, 9], [7]]


def test_batch_rows_put_the_studied_prompt_at_its_row():
    assert batch_rows([5, 6], [[7], [8, 9]], 4, "mixed", row=2) == [[7], [8, 9], [5, 6], [7]]
    assert batch_rows([5, 6], [[7]], 1, "mixed", row=2) == [[5, 6]]  # B=1, the reference: row 0
    assert batch_rows([5, 6], [[7]], 3, "copies", row=2) == [[5, 6]] * 3
