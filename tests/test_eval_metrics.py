"""Eval metrics against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from coderag.eval.metrics import (RANKING_METRICS, Result, Span, chunk_hit_at, contains_gold, contains_gold_file,
                                  file_mrr_at, file_recall_at, gold_file_first, line_hit_at, mean, mrr_at, ndcg_at, overlaps,
                                  percentile, ranked_files, score_ranking, shown_lines, tokens_to_gold)
from coderag.eval.ripgrep_baseline import query_terms

B = Result.block
GOLD = [Span("a.py", 10, 20)]


@pytest.mark.parametrize("start,end,expected", [
    (1, 9, False),     # ends just before
    (1, 10, True),     # touches the first line
    (20, 30, True),    # touches the last line
    (21, 30, False),   # starts just after
    (12, 14, True),    # inside
    (1, 100, True),    # around
])
def test_overlaps_inclusive_ranges(start, end, expected):
    assert overlaps(B("a.py", start, end), GOLD[0]) is expected


def test_overlaps_needs_the_same_file():
    assert not overlaps(B("b.py", 10, 20), GOLD[0])


def test_overlaps_any_span_of_a_multi_span_result():
    assert overlaps(Result("a.py", ((1, 1), (3, 3), (15, 15))), GOLD[0])
    assert not overlaps(Result("a.py", ((1, 1), (30, 30))), GOLD[0])


def test_ranked_files_dedupes_in_order_of_first_appearance():
    ranked = [B("b.py", 1, 2), B("a.py", 1, 2), B("b.py", 5, 6), B("c.py", 1, 1)]
    assert ranked_files(ranked) == ["b.py", "a.py", "c.py"]


def test_file_recall_counts_distinct_files_not_results():
    # b.py three times, then a.py: a.py is the 2nd distinct file, though the 4th result.
    ranked = [B("b.py", 1, 2), B("b.py", 3, 4), B("b.py", 5, 6), B("a.py", 1, 2)]
    assert file_recall_at(ranked, GOLD, 1) == 0.0
    assert file_recall_at(ranked, GOLD, 2) == 1.0


def test_file_recall_is_a_share_of_gold_files():
    gold = [Span("a.py", 1, 2), Span("a.py", 50, 60), Span("b.py", 1, 2)]  # two gold files
    ranked = [B("a.py", 100, 120), B("c.py", 1, 2), B("b.py", 7, 8)]
    assert file_recall_at(ranked, gold, 1) == 0.5
    assert file_recall_at(ranked, gold, 2) == 0.5
    assert file_recall_at(ranked, gold, 3) == 1.0
    assert file_recall_at([], gold, 10) == 0.0


def test_gold_first_is_the_right_file_first_however_many_gold_files():
    gold = [Span("a.py", 1, 2), Span("b.py", 1, 2)]  # a change to two files
    assert gold_file_first([B("a.py", 100, 120), B("c.py", 1, 2)], gold) == 1.0  # where recall@1 is 0.5
    assert gold_file_first([B("c.py", 1, 2), B("b.py", 7, 8)], gold) == 0.0
    assert gold_file_first([], gold) == 0.0


def test_chunk_hit_needs_line_overlap_within_k():
    ranked = [B("a.py", 30, 40), B("b.py", 10, 20), B("a.py", 18, 25)]
    assert chunk_hit_at(ranked, GOLD, 1) == 0.0
    assert chunk_hit_at(ranked, GOLD, 2) == 0.0
    assert chunk_hit_at(ranked, GOLD, 3) == 1.0


def test_mrr_is_the_reciprocal_rank_of_the_first_overlapping_result():
    ranked = [B("a.py", 30, 40), B("b.py", 10, 20), B("a.py", 18, 25), B("a.py", 10, 11)]
    assert mrr_at(ranked, GOLD, 10) == pytest.approx(1 / 3)
    assert mrr_at(ranked, GOLD, 2) == 0.0
    assert mrr_at([], GOLD) == 0.0


def test_ndcg_single_gold_at_rank_3():
    ranked = [B("x.py", 1, 2), B("y.py", 1, 2), B("a.py", 10, 12)]
    # DCG = 1/log2(4) = 0.5; ideal DCG = 1/log2(2) = 1.
    assert ndcg_at(ranked, GOLD, 10) == pytest.approx(0.5)


def test_ndcg_credits_each_gold_range_once():
    # Three pieces of the same gold function: only the first earns gain, so nDCG = 1, not above.
    ranked = [B("a.py", 10, 12), B("a.py", 13, 16), B("a.py", 17, 20)]
    assert ndcg_at(ranked, GOLD, 10) == pytest.approx(1.0)


def test_ndcg_two_golds_hand_computed():
    gold = [Span("a.py", 1, 10), Span("b.py", 1, 10)]
    ranked = [B("a.py", 5, 6), B("z.py", 1, 1), B("b.py", 9, 20)]
    dcg = 1 / math.log2(2) + 1 / math.log2(4)  # ranks 1 and 3
    idcg = 1 / math.log2(2) + 1 / math.log2(3)  # ranks 1 and 2
    assert ndcg_at(ranked, gold, 10) == pytest.approx(dcg / idcg)  # 0.9197
    assert ndcg_at(ranked, gold, 2) == pytest.approx(1 / idcg)  # b.py falls outside the cut


def test_contains_gold_on_a_packed_payload():
    assert contains_gold([B("b.py", 1, 5), B("a.py", 20, 22)], GOLD)
    assert not contains_gold([B("b.py", 10, 20)], GOLD)
    assert not contains_gold([], GOLD)


def test_contains_gold_file_needs_the_file_not_the_lines():
    assert contains_gold_file([B("b.py", 1, 5), B("a.py", 100, 120)], GOLD)
    assert not contains_gold([B("a.py", 100, 120)], GOLD)
    assert not contains_gold_file([B("b.py", 10, 20)], GOLD)


def _chars(text: str) -> int:
    return len(text)


def test_tokens_to_gold_counts_earlier_blocks_whole_and_the_gold_block_to_its_first_gold_line():
    shown = [(B("b.py", 1, 3), "one\ntwo\nsix"),   # 11 characters before the gold block
             (B("a.py", 8, 12), "l8\nl9\nl10\nl11\nl12")]  # gold starts at line 10: its first three lines
    assert tokens_to_gold(shown, GOLD, _chars) == 11 + len("l8\nl9\nl10")
    assert tokens_to_gold(shown[1:], [Span("a.py", 1, 9)], _chars) == len("l8")  # a range begun above: its first line
    assert tokens_to_gold(shown[:1], GOLD, _chars) is None


@pytest.mark.parametrize("p,expected", [(0, 1.0), (50, 2.5), (95, 3.85), (100, 4.0)])
def test_percentile_interpolates_like_numpy(p, expected):
    assert percentile([4.0, 1.0, 3.0, 2.0], p) == pytest.approx(expected)


def test_percentile_and_mean_of_nothing_are_nan():
    assert math.isnan(percentile([], 50))
    assert math.isnan(mean([]))
    assert percentile([7.0], 95) == 7.0


def test_score_ranking_has_every_metric():
    out = score_ranking([B("z.py", 1, 1), B("a.py", 15, 16)], GOLD)
    assert out == {"recall@1": 0.0, "recall@5": 1.0, "recall@10": 1.0, "gold_first": 0.0, "mrr@10": 0.5,
                   "line_hit@1": 0.0, "line_hit@5": 1.0, "hit@1": 0.0, "hit@5": 1.0, "hit@10": 1.0,
                   "chunk_mrr@10": 0.5, "ndcg@10": pytest.approx(1 / math.log2(3))}
    assert tuple(out) == RANKING_METRICS


def test_file_mrr_is_the_first_gold_file_among_distinct_files():
    # a.py is the 2nd distinct file (4th result) and the right region comes later still: file MRR 1/2.
    ranked = [B("b.py", 1, 2), B("b.py", 3, 4), B("b.py", 5, 6), B("a.py", 30, 40), B("a.py", 12, 13)]
    assert file_mrr_at(ranked, GOLD, 10) == 0.5
    assert mrr_at(ranked, GOLD, 10) == pytest.approx(1 / 5)  # chunk level: the 5th result
    assert file_mrr_at(ranked, GOLD, 1) == 0.0
    assert file_mrr_at([B("a.py", 900, 901)], GOLD) == 1.0  # the right file anywhere in it


def test_line_hit_ignores_results_longer_than_200_lines():
    whole_file = B("a.py", 1, 201)  # overlaps the gold range, but shows 201 lines
    assert chunk_hit_at([whole_file], GOLD, 1) == 1.0
    assert line_hit_at([whole_file], GOLD, 1) == 0.0
    assert line_hit_at([B("a.py", 1, 200)], GOLD, 1) == 1.0
    assert line_hit_at([whole_file, B("b.py", 1, 5), B("a.py", 20, 30)], GOLD, 2) == 0.0
    assert line_hit_at([whole_file, B("b.py", 1, 5), B("a.py", 20, 30)], GOLD, 5) == 1.0
    # a ripgrep file shows its matching lines only: 3 lines, one of them in the range
    assert shown_lines(Result("a.py", ((1, 1), (15, 15), (300, 300)))) == 3
    assert line_hit_at([Result("a.py", ((1, 1), (15, 15), (300, 300)))], GOLD, 1) == 1.0


@pytest.mark.parametrize("query,terms", [
    ("Where does click split env var values for nargs=2?", ["click", "split", "env", "var", "values", "nargs"]),
    ("getUserById is called with an id", ["getUserById"]),  # "id": too short, not identifier-like
    ("retry_id in v2", ["retry_id", "v2"]),  # short but identifier-like
    ("the of a an", []),
    ("MAX_RETRIES and max_retries", ["MAX_RETRIES"]),  # case-insensitive dedup
])
def test_query_terms_keeps_identifiers_and_content_words(query, terms):
    assert query_terms(query) == terms
