#!/usr/bin/env python3
"""Writes the goldens that pin stages/score to Search-R1's answer normalisation.

Run from this directory with any CPython 3 (no third-party modules):

    python3 golden.py

normalize_answer, em_check and subem_check are copied from Search-R1
(verl/utils/reward_score/qa_em.py, commit a14dc3a4ffc6fe88c1e95038d9738e21ba3f7a06;
normalize_answer comes from the SQuAD v1.1 evaluation script); f1_score is SQuAD v1.1's
token F1.
extract_answer is Search-R1's extract_solution without its "at least two matches" rule,
because mempo applies it to the final turn's response only, where the prompt's example
answer never appears.

Outputs:
  normalize.json  the case table below with CPython's results;
  unicode.json    for every code point this CPython's unicodedata assigns, the character
                  classes normalize_answer depends on (str.lower, str.isspace, re's \\w,
                  and the Final_Sigma context classes), so the Go tables are checked
                  against CPython everywhere, not only on the cases.
"""
import json
import re
import string
import sys
import unicodedata
from collections import Counter


def normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def em_check(prediction, golden_answers):
    if isinstance(golden_answers, str):
        golden_answers = [golden_answers]
    normalized_prediction = normalize_answer(prediction)
    score = 0
    for golden_answer in golden_answers:
        golden_answer = normalize_answer(golden_answer)
        if golden_answer == normalized_prediction:
            score = 1
            break
    return score


def subem_check(prediction, golden_answers):
    if isinstance(golden_answers, str):
        golden_answers = [golden_answers]
    normalized_prediction = normalize_answer(prediction)
    score = 0
    for golden_answer in golden_answers:
        golden_answer = normalize_answer(golden_answer)
        if golden_answer in normalized_prediction:
            score = 1
            break
    return score


def f1_score(prediction, ground_truth):
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def max_f1(prediction, golden_answers):
    return max(float(f1_score(prediction, g)) for g in golden_answers)


def extract_answer(text):
    matches = list(re.finditer(r"<answer>(.*?)</answer>", text, re.DOTALL))
    if not matches:
        return None
    return matches[-1].group(1).strip()


# (name, text): normalisation only.
NORMALIZE = [
    ("empty", ""),
    ("spaces_only", "   \t\n "),
    ("plain", "Paris"),
    ("article_the", "The Beatles"),
    ("article_a", "a dog"),
    ("article_an", "An apple"),
    ("article_upper", "THE END"),
    ("articles_only", "the a an"),
    ("article_adjacent", "a a a"),
    ("article_inside_word_theater", "theater"),
    ("article_inside_word_another", "another anthem"),
    ("article_prefix_athe", "athe thea"),
    ("article_after_hyphen_removed", "the-end"),
    ("article_hyphen_spaced", "the - end"),
    ("article_apostrophe", "the'a"),
    ("article_underscore", "the_end"),
    ("article_digit_glued", "the1 a2"),
    ("article_accent_glued", "thé"),
    ("article_combining_mark", "the\u0301 end"),
    ("article_unicode_punct_neighbour", "\u201cthe\u201d"),
    ("punct_ascii_all", string.punctuation),
    ("punct_comma_number", "1,000"),
    ("punct_decimal", "3.5"),
    ("punct_negative", "-3.5%"),
    ("punct_date", "12/25/2020"),
    ("punct_abbrev", "U.S.A."),
    ("punct_possessive", "Newton's"),
    ("punct_curly_quotes", "\u201cParis\u201d"),
    ("punct_curly_apostrophe", "Newton\u2019s"),
    ("punct_em_dash", "1914\u20141918"),
    ("punct_en_dash_spaced", "1914 \u2013 1918"),
    ("punct_inverted", "\u00bfQu\u00e9?"),
    ("punct_guillemets", "\u00able Monde\u00bb"),
    ("punct_cjk", "\u6771\u4eac\u3002"),
    ("punct_fullwidth", "\uff08Tokyo\uff09"),
    ("ws_tabs_newlines", "New\tYork\nCity"),
    ("ws_nbsp", "New\u00a0York"),
    ("ws_ideographic", "New\u3000York"),
    ("ws_em_space", "New\u2003York"),
    ("ws_narrow_nbsp", "New\u202fYork"),
    ("ws_line_separator", "New\u2028York"),
    ("ws_nel", "New\u0085York"),
    ("ws_file_separator", "New\x1cYork"),
    ("ws_unit_separator", "New\x1fYork"),
    ("ws_zero_width_space_kept", "New\u200bYork"),
    ("ws_bom_kept", "\ufeffParis"),
    ("ws_mongolian_vowel_sep_kept", "New\u180eYork"),
    ("ws_vertical_tab_formfeed", "a\x0bb\x0cc"),
    ("unicode_accents", "Café Müller"),
    ("unicode_decomposed", "Cafe\u0301"),
    ("unicode_dotted_capital_i", "\u0130stanbul"),
    ("unicode_dotless_i", "\u0131"),
    ("unicode_german_sharp_capital", "STRA\u1e9eE"),
    ("unicode_greek_final_sigma", "\u039f\u0394\u039f\u03a3"),
    ("unicode_greek_sigma_middle", "\u03a3\u039f\u03a3\u039f"),
    ("unicode_greek_sigma_alone", "\u03a3"),
    ("unicode_greek_sigma_before_period", "\u039f\u03a3."),
    ("unicode_greek_sigma_apostrophe_word", "\u039f\u03a3'\u0391"),
    ("unicode_greek_sigma_space_word", "\u039f\u03a3 \u0391"),
    ("unicode_titlecase_digraph", "\u01c5"),
    ("unicode_roman_numeral", "\u2167"),
    ("unicode_circled", "\u24b6\u24d1"),
    ("unicode_fullwidth_letters", "\uff34\uff28\uff25"),
    ("unicode_cyrillic", "\u041c\u043e\u0441\u043a\u0432\u0430"),
    ("unicode_cjk", "\u6771\u4eac"),
    ("unicode_emoji", "\U0001f600 the \U0001f600"),
    ("unicode_superscript_digit", "x\u00b2"),
    ("unicode_arabic_digits", "\u0661\u0662\u0663"),
    ("unicode_replacement_char", "a\ufffdb"),
    ("numbers_ordinal", "the 2nd"),
    ("numbers_year_range", "1990s"),
    ("mixed_long", "  The   Quick, brown fox -- jumps over 'a' lazy DOG!  "),
]

# (name, prediction, golds): EM and substring EM (any alias), F1 (max over aliases).
METRIC = [
    ("em_exact", "Paris", ["Paris"]),
    ("em_case_article", "the paris", ["Paris"]),
    ("em_second_alias", "NYC", ["New York City", "NYC"]),
    ("em_none", "London", ["Paris", "Lyon"]),
    ("em_number_comma", "1000", ["1,000"]),
    ("em_decimal_trap", "35", ["3.5"]),
    ("em_unicode_punct_differs", "\u201cParis\u201d", ["Paris"]),
    ("em_empty_vs_article", "", ["The"]),
    ("em_empty_both", "", [""]),
    ("f1_partial", "New York", ["New York City"]),
    ("f1_superset", "the city of New York", ["New York"]),
    ("f1_repeated_tokens", "new new york", ["new york york"]),
    ("f1_max_alias", "barack obama", ["Obama", "Barack Hussein Obama"]),
    ("f1_disjoint", "cat", ["dog"]),
    ("f1_empty_prediction", "", ["dog"]),
    ("f1_empty_gold", "dog", [""]),
    ("f1_articles_only", "the", ["a"]),
    ("f1_unicode_tokens", "caf\u00e9 m\u00fcller", ["Caf\u00e9"]),
    ("f1_thirds", "a b c d e f", ["b c g"]),
    ("subem_prediction_longer", "the city of Paris", ["paris"]),
    ("subem_gold_longer", "Paris", ["Paris, France"]),
    ("subem_second_alias", "born in NYC", ["New York City", "NYC"]),
    ("subem_inside_word", "comparison", ["Paris"]),
    ("subem_across_tokens", "new york city", ["York Ci"]),
    ("subem_punct_removed", "about 1,000 people", ["1000"]),
    ("subem_article_removed", "an apple pie recipe", ["the apple pie"]),
    ("subem_whitespace_collapsed", "New \t York  City", ["new york"]),
    ("subem_unicode_punct_kept", "\u201cParis\u201d", ["Paris"]),
    ("subem_dotted_capital_i", "\u0130stanbul", ["istanbul"]),
    ("subem_combining_mark", "Cafe\u0301", ["cafe"]),
    ("subem_empty_prediction", "", ["dog"]),
    ("subem_empty_gold", "London", [""]),
    ("subem_gold_article_only", "London", ["The"]),
    ("subem_gold_punct_only", "London", ["?!"]),
    ("subem_none", "London", ["Paris", "Lyon"]),
]

# (name, final-turn text): answer extraction.
EXTRACT = [
    ("none", "<mem>m</mem><think>t</think><search>q</search>"),
    ("one", "<mem>m</mem><answer> Paris </answer>"),
    ("two_takes_last", "<answer>a</answer> then <answer>b</answer>"),
    ("multiline", "<answer>\nNew York;\n 1990 \n</answer>"),
    ("unclosed", "<answer>Paris"),
    ("empty", "<answer></answer>"),
    ("nested_open", "<answer>x <answer>y</answer>"),
    ("unicode_space_strip", "<answer>\u3000Paris\u00a0</answer>"),
]


def code_point_classes():
    """Code-point ranges of each class over the code points CPython assigns."""
    assigned, space, word, lower = [], [], [], []
    sigma_ignorable, sigma_cased = [], []
    for cp in range(0x110000):
        c = chr(cp)
        cat = unicodedata.category(c)
        if cat in ("Cn", "Cs"):
            continue
        assigned.append(cp)
        if c.isspace():
            space.append(cp)
        if c.isalnum() or c == "_":
            word.append(cp)
        if c.lower() != c:
            lower.append([cp, c.lower()])
        # The Final_Sigma scan reveals both properties: a case-ignorable c is skipped, so
        # "AΣc" ends the word (ς) while "AΣcA" does not (σ); otherwise c decides alone.
        end = ("A\u03a3" + c).lower()[1]
        more = ("A\u03a3" + c + "A").lower()[1]
        if end == "\u03c2" and more == "\u03c3":
            sigma_ignorable.append(cp)
        elif end == "\u03c3":
            sigma_cased.append(cp)
    return {
        "python": sys.version.split()[0],
        "unidata": unicodedata.unidata_version,
        "assigned": ranges(assigned),
        "space": ranges(space),
        "word": ranges(word),
        "case_ignorable": ranges(sigma_ignorable),
        "cased_not_ignorable": ranges(sigma_cased),
        "lower": lower,
    }


def ranges(cps):
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def main():
    doc = {
        "python": sys.version.split()[0],
        "unidata": unicodedata.unidata_version,
        "normalize": [{"name": n, "text": t, "want": normalize_answer(t)} for n, t in NORMALIZE],
        "metric": [
            {"name": n, "prediction": p, "golds": g, "em": em_check(p, g),
             "subem": subem_check(p, g), "f1": max_f1(p, g)}
            for n, p, g in METRIC
        ],
        "extract": [{"name": n, "text": t, "want": extract_answer(t)} for n, t in EXTRACT],
    }
    with open("normalize.json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    with open("unicode.json", "w") as f:
        json.dump(code_point_classes(), f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
