from canvaslab.studies.batch_size.design import batch_rows


def test_batch_rows_copies_and_mixed():
    assert batch_rows([5, 6], [[7]], 3, "copies") == [[5, 6], [5, 6], [5, 6]]
    assert batch_rows([5, 6], [[7], [8, 9]], 4, "mixed") == [[5, 6], [7], [8, 9], [7]]


def test_batch_rows_put_the_studied_prompt_at_its_row():
    assert batch_rows([5, 6], [[7], [8, 9]], 4, "mixed", row=2) == [[7], [8, 9], [5, 6], [7]]
    assert batch_rows([5, 6], [[7]], 1, "mixed", row=2) == [[5, 6]]  # B=1, the reference: row 0
    assert batch_rows([5, 6], [[7]], 3, "copies", row=2) == [[5, 6]] * 3
