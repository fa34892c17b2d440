"""Build `lighthouse.json` (the shipped evaluation dataset) from `lighthouse_script.txt`.

The story is written by hand in the script (scenes of "C:"/"M:" lines with optional [labels]);
this module numbers the messages, resolves the labels in the question set, the threads and the
lies to message ids, checks that every label exists and that each question's evidence holds a
word of its answer (or says in PARAPHRASED how it is said), as each line that states it again
(RESTATED) must, and writes the dataset. Run it after
editing the script:

    .venv/bin/python assets/eval/make_lighthouse.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kotonia_tui.eval.evidence import answer_words

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "lighthouse_script.txt"
OUT = HERE / "lighthouse.json"

CHARACTER = {
    "name": "Corwin",
    "description": (
        "Corwin Hale, about sixty, keeper of the lighthouse on Gull's Reach, a half-mile tidal "
        "rock four miles off the harbour town of Pellmouth. Broad, grey-bearded, with a cold "
        "pipe he never lights and a scarred right hand. He has kept the light for ten years, "
        "alone with a black cat. He tells people he was once a steamer captain."
    ),
    "personality": (
        "Gruff, kind, proud of his lamp, quick with a sea story and slow to talk about himself; "
        "he hides grief behind jokes and keeps his promises."
    ),
    "scenario": (
        "October, the 1890s. Mara Lind, a surveyor from the Harbour Board, comes to stay on the "
        "Reach for two weeks to decide whether the light should be made automatic."
    ),
}
USER = {
    "name": "Mara",
    "description": "Mara Lind, a surveyor for the Harbour Board, a clockmaker's daughter.",
}

# (id, kind, question, short answer, evidence labels)
QUESTIONS: list[tuple[str, str, str, str, list[str]]] = [
    ("q01", "constraint", "What does Mara want to be called instead of 'miss'?", "Mara", ["c_name"]),
    ("q02", "constraint", "What must never be put in Mara's tea?", "rum", ["c_rum"]),
    ("q03", "user", "What is the name of Mara's theodolite?", "Old Brass", ["c_brass"]),
    ("q04", "constraint", "Who is allowed to touch Mara's theodolite?", "only Mara", ["c_brass"]),
    ("q05", "lie", "Which ship did Corwin claim he had been captain of?", "the Albatross",
     ["lie_captain"]),
    ("q06", "lie", "What did Corwin first say caused the scar on his hand?", "a shark",
     ["lie_scar"]),
    ("q07", "fact", "What is the lighthouse cat called?", "Soot", ["cat"]),
    ("q08", "fact", "What colour is the cat's one odd paw?", "white", ["cat"]),
    ("q09", "fact", "How many steps lead up to the lantern room?", "ninety-one", ["steps"]),
    ("q10", "fact", "How far does the light reach on a clear night?", "eighteen miles",
     ["range18"]),
    ("q11", "constraint", "By what date must Mara be back on the mainland?", "the 14th",
     ["c_wedding"]),
    ("q12", "user", "Who is getting married on the 14th?", "Ilse, Mara's sister", ["c_wedding"]),
    ("q13", "user", "In which town did Mara grow up?", "Harwick", ["harwick_named", "harwick"]),
    ("q14", "user", "What was Mara's father's trade?", "clockmaker", ["harwick"]),
    ("q15", "constraint", "Why will Mara not go out on the lighthouse gallery?",
     "she is afraid of heights", ["c_heights"]),
    ("q16", "fact", "How many barrels of lamp oil were left when Mara arrived?", "nine",
     ["oil_count"]),
    ("q17", "fact", "What is the supply boat called?", "the Margery", ["oil_count"]),
    ("q18", "user", "How does Mara take her tea?", "with honey", ["honey"]),
    ("q19", "fact", "Which year's logbook was missing from the shelf?", "1887",
     ["logbook_lost"]),
    ("q20", "lie", "What did Corwin say had happened to the missing logbook?",
     "ruined in the flood of '88 and burned", ["logbook_lost"]),
    ("q21", "fact", "Who kept the light in 1887?", "old Mr Penhallow", ["penhallow"]),
    ("q22", "lie", "What did Corwin claim about going to Pellmouth?",
     "he never goes there", ["lie_pellmouth"]),
    ("q23", "fact", "What was wrong with the fog bell?", "its clapper was cracked",
     ["bell_clapper", "bell_cracked"]),
    ("q24", "decision", "Why did they repair the clapper instead of ordering a new bell?",
     "a new bell would take at least three weeks", ["d_clapper"]),
    ("q25", "decision", "When the supply boat was late, what did they decide about the lamp?",
     "small wick from midnight to four", ["d_oil"]),
    ("q26", "decision", "Why did Mara survey the north cove first?",
     "the lowest tides of the month were on the 4th and 5th", ["d_cove"]),
    ("q27", "user", "How many mills are there in Harwick?", "eleven", ["harwick_mills"]),
    ("q28", "user", "How old was Mara when her father died?", "nineteen", ["father_died"]),
    ("q29", "fact", "What went wrong with Old Brass in the north cove?",
     "the eyepiece lens fogged up", ["lens_fog"]),
    ("q30", "resolved", "How was the fogged eyepiece dried?", "in a sack of rice",
     ["lens_fog", "rice_tip", "rice_sack", "rice_worked", "lens_ok"]),
    ("q31", "resolved", "Where was the missing cat found?", "in the oil store",
     ["cat_missing", "cat_found"]),
    ("q32", "fact", "How many kittens did Soot have?", "three", ["cat_found"]),
    ("q33", "fact", "What are the kittens named?", "Brass, Ilse and Margery", ["kittens"]),
    ("q34", "resolved", "What was the new bell clapper forged from?", "an iron boat-hook",
     ["forge_plan", "clapper_fixed"]),
    ("q35", "fact", "What draught did Corwin first give for the Albatross?", "twenty fathoms",
     ["draught"]),
    ("q36", "decision", "Why did Corwin burn the lamp at full wick on the storm night?",
     "ships in the storm needed all eighteen miles of light", ["d_fullwick"]),
    ("q37", "fact", "What is the name of the fisherman rescued from the sandbar?", "Piet Vos",
     ["piet_named"]),
    ("q38", "fact", "What was the rescued fisherman's boat called?", "the Little Hen",
     ["piet_named"]),
    ("q39", "fact", "What injury did the rescued fisherman have?", "a broken leg", ["piet_found"]),
    ("q40", "lie", "What did Piet say Corwin had been on the Albatross?", "the cook",
     ["piet_recognise"]),
    ("q41", "decision", "Why does Piet go home on the Margery rather than in Jory's rowboat?",
     "with a broken leg he cannot be in an open boat", ["d_piet"]),
    ("q42", "fact", "What was the name of Corwin's brother?", "Tomas", ["tomas"]),
    ("q43", "resolved", "Where was the 1887 logbook found?", "in the boathouse under the nets",
     ["logbook_lost", "logbook_found"]),
    ("q44", "fact", "According to the crew list, what was C. Hale on the Albatross?", "cook",
     ["crewlist"]),
    ("q45", "fact", "How far did the sandbar move in the storm?", "forty yards", ["bar_moved"]),
    ("q46", "fact", "What was clogging the cottage clock?", "soot from the stove", ["clock"]),
    ("q47", "resolved", "How many days late did the Margery arrive?", "six",
     ["boat_late", "margery_arrives"]),
    ("q48", "fact", "How many barrels of oil did the Margery bring?", "twenty", ["oil_full"]),
    ("q49", "user", "What will Ilse wear at her wedding?", "their mother's veil",
     ["veil", "veil_detail"]),
    ("q50", "lie", "Who is Agnes Hale?", "Tomas's widow, Corwin's sister-in-law",
     ["agnes_letter", "confess_pellmouth"]),
    ("q51", "lie", "What was Corwin really on the Albatross?", "the cook", ["confess_cook"]),
    ("q52", "lie", "Where was Corwin on the night the Albatross sailed?",
     "drunk ashore in Pellmouth", ["confess_ashore"]),
    ("q53", "fact", "How many hands were lost with the Albatross?", "nineteen",
     ["confess_ashore"]),
    ("q54", "lie", "Why does Corwin go to Pellmouth every month?",
     "to take half his wages to Agnes", ["confess_pellmouth"]),
    ("q55", "lie", "What really caused the scar on Corwin's hand?", "a galley stove",
     ["confess_scar"]),
    ("q56", "decision", "What did Mara recommend for Gull's Reach?",
     "that it stays a manned station", ["d_recommend"]),
    ("q57", "decision", "Why did Mara recommend keeping a keeper?",
     "the sandbar moves and only a keeper can see it", ["d_recommend"]),
    ("q58", "decision", "What did Corwin promise to send Mara, and when?",
     "sandbar readings on the first of every month", ["promise_readings"]),
    ("q59", "decision", "What did Mara promise to send Corwin?",
     "a photograph of Ilse in the veil", ["promise_photo"]),
    ("q60", "fact", "What was the Albatross's real draught?", "fourteen feet",
     ["real_draught"]),
    ("q61", "fact", "What will Piet name his new boat?", "the Albatross", ["piet_boat"]),
    ("q62", "fact", "On which day must the cottage clock be wound?", "Sundays", ["sundays"]),
]

# (id, topic, keywords, opened label, resolved label)
THREADS = [
    ("t_logbook", "the missing 1887 logbook", ["logbook", "1887"], "logbook_lost",
     "logbook_found"),
    ("t_margery", "the late supply boat", ["margery", "supply boat"], "boat_late",
     "margery_arrives"),
    ("t_clapper", "the cracked fog-bell clapper", ["clapper", "fog bell"], "bell_cracked",
     "clapper_fixed"),
    ("t_cat", "the missing cat", ["soot", "cat"], "cat_missing", "cat_found"),
    ("t_lens", "the fogged eyepiece", ["eyepiece", "lens"], "lens_fog", "lens_ok"),
    ("t_ration", "the oil ration", ["ration", "small wick"], "d_oil", "oil_full"),
    ("t_piet", "the injured fisherman", ["piet"], "piet", "piet_boat"),
    ("t_identity", "what Corwin was on the Albatross", ["albatross", "captain"], "lie_captain",
     "confess_cook"),
    ("t_pellmouth", "Corwin and Pellmouth", ["pellmouth", "agnes"], "lie_pellmouth",
     "confess_pellmouth"),
    ("t_report", "the Board's decision about the light", ["report", "recommend", "automat"],
     "purpose", "d_recommend"),
]

# (id, claim, truth, keywords that state it, keywords that show it is not stated as fact, label)
LIES = [
    ("lie_captain", "Corwin was captain of the Albatross",
     "he was her cook; his brother Tomas was captain", ["corwin", "captain"],
     ["tomas", "cook", "brother", "claim", "pretend", "lie", "lied"], "lie_captain"),
    ("lie_scar", "a shark caused Corwin's scar", "a galley stove in 1884", ["shark"],
     ["stove", "fat", "galley"], "lie_scar"),
    ("lie_pellmouth", "Corwin never goes to Pellmouth",
     "he rows over every month to bring money to Agnes", ["never", "pellmouth"],
     ["agnes", "ticket", "money", "ferry", "every month"], "lie_pellmouth"),
    ("lie_logbook", "the 1887 logbook was ruined in a flood and burned",
     "he hid it in the boathouse", ["logbook", "burn"], ["boathouse", "found", "hid", "hidden"],
     "logbook_lost"),
]

# Questions whose evidence says the answer in other words, each with why. The builder refuses
# any other question whose evidence messages hold none of the answer's content words, as the
# evaluation counts them (`answer_words`): a label put on the question's line instead of the
# line that answers it.
PARAPHRASED: dict[str, str] = {
    "q04": "Mara says 'nobody touches it but me'",
    "q47": "counted from the day the Margery was due and the day she came",
}


# Other lines that state a question's answer again (its `restated`): a report that sums up,
# a confession that repeats a thought, a line said again later. Each holds a word of the
# answer, as the evaluation counts them; a reply that only echoes the line just before it is
# not one (recall brings it with that line).
RESTATED: dict[str, list[str]] = {
    "q02": ["honey", "tea_remember", "tea_flask", "rum_his_mug", "parting_tea"],
    "q05": ["piet_recognise", "confess_cook"],
    "q07": ["soot_landing", "cat_found", "soot_kittens"],
    "q12": ["wedding_14th"],
    "q14": ["clockmaker_daughter", "goodbye_clockmaker"],
    "q18": ["tea_remember", "tea_flask", "truth_tea", "parting_tea"],
    "q19": ["logbook_gap", "logbook_found"],
    "q22": ["pellmouth_seen", "confess_pellmouth"],
    "q32": ["soot_kittens", "kittens_three", "kittens_named", "never_alone"],
    "q33": ["kittens_named", "never_alone"],
    "q34": ["boathook_clapper", "bell_report"],
    "q37": ["report_named"],
    "q38": ["little_hen_sorry"],
    "q39": ["leg_splint", "leg_rowboat", "d_piet"],
    "q42": ["lie_captain", "confess_cook"],
    "q44": ["crew_list_cook"],
    "q45": ["d_recommend"],
    "q47": ["margery_sighted"],
    "q48": ["margery_cargo"],
    "q49": ["promise_photo"],
    "q51": ["lie_captain", "crew_list_cook"],
    "q55": ["lie_scar"],
    "q58": ["readings_promise", "readings_again"],
}


_LINE = re.compile(r"^(?P<who>[CM])(?:\[(?P<label>[a-z0-9_]+)\])?:\s*(?P<text>.+)$")


def parse_script(text: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    messages: list[dict[str, Any]] = []
    labels: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise SystemExit(f"{SCRIPT.name}:{number}: not a 'C:' or 'M:' line: {line[:60]!r}")
        mid = len(messages) + 1
        if match.group("label"):
            label = match.group("label")
            if label in labels:
                raise SystemExit(f"{SCRIPT.name}:{number}: label {label!r} used twice")
            labels[label] = mid
        user = match.group("who") == "M"
        messages.append(
            {
                "id": mid,
                "role": "user" if user else "character",
                "speaker": USER["name"] if user else CHARACTER["name"],
                "text": match.group("text").strip(),
            }
        )
    return messages, labels


def build() -> dict[str, Any]:
    messages, labels = parse_script(SCRIPT.read_text(encoding="utf-8"))

    def at(label: str) -> int:
        if label not in labels:
            raise SystemExit(f"unknown label {label!r}")
        return labels[label]

    def evidence(qid: str, answer: str, cited: list[str]) -> list[int]:
        ids = [at(label) for label in cited]
        texts = [messages[i - 1]["text"] for i in ids]
        if qid not in PARAPHRASED and not answer_words(answer, texts).any_there:
            raise SystemExit(
                f"{qid}: no evidence message ({', '.join(f'#{i}' for i in ids)}) holds a word of "
                f"the answer {answer!r}; label the line that states it, or say in PARAPHRASED "
                "how it is said"
            )
        return ids

    def restated(qid: str, answer: str, evidence_ids: list[int]) -> list[int]:
        ids = [at(label) for label in RESTATED.get(qid, [])]
        for i in ids:
            if i in evidence_ids:
                raise SystemExit(f"{qid}: #{i} is its evidence, not a restatement")
            if not answer_words(answer, [messages[i - 1]["text"]]).any_there:
                raise SystemExit(
                    f"{qid}: the restatement #{i} holds no word of the answer {answer!r}"
                )
        return ids

    def question(qid: str, kind: str, text: str, answer: str, cited: list[str]) -> dict[str, Any]:
        ids = evidence(qid, answer, cited)
        record: dict[str, Any] = {
            "id": qid,
            "kind": kind,
            "question": text,
            "answer": answer,
            "evidence": ids,
        }
        if again := restated(qid, answer, ids):
            record["restated"] = again
        return record

    return {
        "title": "The Keeper of Gull's Reach",
        "about": (
            "An original conversation written for Kotonia TUI's evaluation: a lighthouse keeper "
            "who lies about his past (his thoughts and the narration show the truth), decisions "
            "with reasons, constraints the user sets early, and events that get resolved. "
            "Built by assets/eval/make_lighthouse.py from lighthouse_script.txt."
        ),
        "license": "MIT (same as Kotonia TUI)",
        "character": CHARACTER,
        "user": USER,
        "messages": messages,
        "questions": [question(*entry) for entry in QUESTIONS],
        "threads": [
            {
                "id": tid,
                "topic": topic,
                "keywords": keywords,
                "opened": at(opened),
                "resolved": at(resolved),
            }
            for tid, topic, keywords, opened, resolved in THREADS
        ],
        "lies": [
            {
                "id": lid,
                "claim": claim,
                "truth": truth,
                "keywords": keywords,
                "except_keywords": excepts,
                "message": at(label),
            }
            for lid, claim, truth, keywords, excepts, label in LIES
        ],
    }


if __name__ == "__main__":
    dataset = build()
    OUT.write_text(json.dumps(dataset, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(
        f"wrote {OUT.name}: {len(dataset['messages'])} messages, "
        f"{len(dataset['questions'])} questions, {len(dataset['threads'])} threads, "
        f"{len(dataset['lies'])} lies"
    )
