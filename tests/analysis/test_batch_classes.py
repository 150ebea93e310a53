from canvaslab.analysis.batch_classes import common_classes, equivalence_classes


def test_equivalence_classes_group_identical_signatures():
    assert equivalence_classes({1: "a", 2: "a", 3: "b", 4: "b"}) == [[1, 2], [3, 4]]
    assert equivalence_classes({1: "a", 2: "b", 3: "c"}) == [[1], [2], [3]]


def test_common_classes_is_the_meet_of_partitions():
    assert common_classes([[[1, 2], [3, 4]], [[1, 2, 3], [4]]]) == [[1, 2], [3], [4]]
