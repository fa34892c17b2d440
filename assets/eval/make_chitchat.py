"""Build `chitchat.json` (the second evaluation dataset) from `chitchat_source.json`.

The source is public: nine chats between two brothers at Brigham Young University, 19 October
to 2 November 2018, from the BYU Perception, Control and Cognition lab's Chit-Chat Challenge
dataset (MIT licence), as the PyPI package `chitchat-dataset` 0.9.0 ships it
(github.com/BYU-PCCL/chitchat-dataset). `chitchat_source.json` holds those nine conversations
exactly as the package's `dataset.json` has them; `--extract` writes it again from that file.

This module makes one message of each turn (the lines one person typed before the other
answered, one line each), names the two anonymous senders (Kyle, as the source's text calls
him, is the character; his younger brother, whom the text never names, is the user, Sam), opens
each chat with its date and prompt as narration (the only place the model can see when it
happened), and resolves the questions' evidence: each evidence message (and each line that
states the answer again, RESTATED) is given with a phrase it must contain, so a question whose
answer is not in its messages fails the build.

    .venv/bin/python assets/eval/make_chitchat.py
    .venv/bin/python assets/eval/make_chitchat.py --extract .../chitchat_dataset/dataset.json
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from kotonia_tui.eval.evidence import answer_words

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "chitchat_source.json"
OUT = HERE / "chitchat.json"

KYLE = "994e94a5-6ae0-4365-8322-93d359cf1c3c"  # the older brother: the character
SAM = "fe6382e6-e3a7-48eb-8406-0aa6b9463ce8"  # the younger brother: the user

# The timestamps are UTC. The chats happened in Provo, Utah, on Mountain Daylight Time (UTC-6),
# which ended on 4 November 2018, after the last chat; build() checks that it still applies.
PROVO = timezone(timedelta(hours=-6), "MDT")
MDT_ENDS = datetime(2018, 11, 4, 8, 0, tzinfo=UTC)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")

CHARACTER = {
    "name": "Kyle",
    "description": (
        "Kyle, a student in his last year at Brigham Young University in Provo, Utah, in the "
        "autumn of 2018, Sam's older brother."
    ),
    "personality": "Friendly, talkative and competitive; likes to give his younger brother advice.",
    "scenario": (
        "The two brothers chat online in the Chit-Chat Challenge, a BYU contest in which "
        "students earned points for typed conversations that start from a given prompt."
    ),
}
USER = {"name": "Sam", "description": "Sam, Kyle's younger brother, in his first year at BYU."}

# First message of each chat, in order: questions about dates cite these.
S1, S2, S3, S4, S5, S6, S7, S8, S9 = 1, 33, 54, 88, 106, 145, 202, 256, 309

# (id, kind, question, short answer, [(message id, a phrase that message contains), ...])
Evidence = list[tuple[int, str]]
QUESTIONS: list[tuple[str, str, str, str, Evidence]] = [
    # --- what Sam (the user) says about himself
    ("q01", "user", "Does Sam prefer Mozart or Beethoven?", "Mozart",
     [(2, "I'm a mozart guy myself")]),
    ("q02", "user", "What did Sam cook for himself on the evening of the first chat?",
     "homemade fried chicken", [(6, "I just made home made fried chicken")]),
    ("q03", "user", "Which restaurant did Sam's fried chicken remind him of?", "Canes",
     [(8, "it reminds me of canes")]),
    ("q04", "user", "Besides medical school, what path has Sam been considering?",
     "the accounting program and business", [(26, "doing the accounting program here")]),
    ("q05", "user", "Which piece of music did Sam learn to play on the piano?",
     "the Interstellar main theme",
     [(40, "I learned how to play the main theme on the piano")]),
    ("q06", "user", "How many people live in Sam's dorm this term?", "4",
     [(52, "I only have 4 people in my dorm")]),
    ("q07", "user", "What code name did Sam give himself?", "Bruce", [(60, "I'm Bruce")]),
    ("q08", "user", "What had Sam eaten that day before the dinner on 21 October?",
     "a Clif bar and cereal", [(70, "except a clif bar and cereal today")]),
    ("q09", "user", "Who is Sam's modern-day hero?", "John H Groberg, his ancestor",
     [(88, "My modern day hero is John H Groberg, I am his descendant")]),
    ("q10", "user", "What score did Sam get on his nutrition exam?", "100%",
     [(113, "I got a 100% on my nutrition exam")]),
    ("q11", "user", "What major was Sam thinking of taking on the way to medical school?",
     "dietetics", [(119, "I might actually major in dietetics")]),
    ("q12", "user", "Which day would Sam relive?", "a last choir concert or the New York trip",
     [(109, "maybe like some of my last choir concerts or our trip to new york")]),
    ("q13", "user", "What are the names of Sam's other siblings?", "Jason, Kate and Tessa",
     [(174, "jason and kate and tessa")]),
    ("q14", "user", "How far down the waitlists for his classes was Sam?", "30th and 70th",
     [(180, "im like 30 on one and 70 on another")]),
    ("q15", "user", "Which gym does Sam go to?", "the Smith Fieldhouse",
     [(283, "yeah just the smith fieldhouse")]),
    ("q16", "user", "Why was Sam still up after midnight on 2 November?",
     "a forgotten career exploration assignment",
     [(322, "I forgot to do an assignment for my career exploration class")]),
    # --- facts about Kyle and the people and things around him
    ("q17", "fact", "Where did Kyle and Taylor once eat at Canes?", "in Vegas",
     [(9, "Taylor and I went to Vegas once and we got canes")]),
    ("q18", "fact", "How old will Oliver be when Kyle is done with school?", "8",
     [(23, "he will be 8 when I'm all done with school")]),
    ("q19", "fact", "Which relative did Kyle suggest Sam talk to about medicine?",
     "Grandpa Rosenbaum", [(29, "talk to grandpa rosenbaum")]),
    ("q20", "fact", "Which intelligent movie computer does Kyle like best?", "Jarvis",
     [(35, "I like Jarvis")]),
    ("q21", "fact", "On which channel and night is The Good Doctor on?", "ABC on Monday nights",
     [(47, "It's on ABC on Monday nights")]),
    ("q22", "fact", "Who are Kyle's modern-day heroes?", "his wife, his parents and her parents",
     [(89, "my modern day hero are my wife and my parents and her parents")]),
    ("q23", "fact", "What kind of business does Taylor have?", "a print shop",
     [(99, "She has a print shop")]),
    ("q24", "fact", "What day of his life would Kyle relive?", "his wedding day",
     [(106, "I would relive the day that I got married")]),
    ("q25", "fact", "What grade does Kyle have in Biochemistry?", "about 66%",
     [(144, "I have like a 66% in the class")]),
    ("q26", "fact", "How long is dental school?", "four years",
     [(187, "Dental school is four years")]),
    ("q27", "fact", "What does Kyle want to become after dental school?", "an orthodontist",
     [(187, "I want to be an orthodontist")]),
    ("q28", "fact", "Why did Kyle go to the neuroscience club meeting?", "for the free cookies",
     [(199, "I went for the free cookies")]),
    ("q29", "fact", "What is the new ride at Lagoon called?", "Cannibal",
     [(227, "a new one called cannibal"), (228, "Yeah Cannibal is awesome")]),
    ("q30", "fact", "Which team did BYU play at the basketball game Kyle camped out for?",
     "Gonzaga", [(302, "It was against Gonzaga but we lost")]),
    ("q31", "fact", "What is the name of Kelley's brother?", "Richard",
     [(278, "His brother is Richard")]),
    ("q32", "fact", "Why was Kyle awake at one in the morning on 2 November?",
     "the baby woke up and wanted to play with books",
     [(319, "the baby woke up and for some reason just wants to play with books")]),
    # --- when, in which chat, in what order
    ("q33", "temporal", "On what date did Sam make homemade fried chicken?",
     "Friday 19 October 2018", [(S1, "Friday, 19 October 2018"), (6, "home made fried chicken")]),
    ("q34", "temporal", "On which evening did Kyle watch August Rush?",
     "Saturday 20 October 2018",
     [(S2, "Sunday, 21 October 2018"), (41, "We put on August Rush last night")]),
    ("q35", "temporal", "On which day was Sam's Book of Mormon class cancelled?",
     "Monday 22 October 2018",
     [(S4, "Monday, 22 October 2018"), (92, "My Book of Mormon class got cancelled")]),
    ("q36", "temporal", "On which day did Kyle say he had about 66% in Biochemistry?",
     "Wednesday 31 October 2018",
     [(S5, "Wednesday, 31 October 2018"), (144, "66% in the class")]),
    ("q37", "temporal", "On which day did Kyle hear that Oliver had a fever?",
     "Wednesday 31 October 2018",
     [(S6, "Wednesday, 31 October 2018"), (199, "Oliver has a fever")]),
    ("q38", "temporal", "On which day was Sam at the temple?", "Thursday 1 November 2018",
     [(S7, "Thursday, 1 November 2018"), (253, "I'm at the temple now")]),
    ("q39", "temporal", "In what month was Kyle's son born?", "April",
     [(145, "my son was born in April")]),
    ("q40", "temporal", "When will the dental schools release their decisions?", "December 1st",
     [(189, "They can't release any information until December 1st")]),
    ("q41", "temporal", "When does Kyle plan to graduate from BYU?", "in April",
     [(142, "I graduate in April")]),
    ("q42", "temporal", "How many times did the brothers chat on 31 October?", "twice",
     [(S5, "Wednesday, 31 October 2018"), (S6, "Wednesday, 31 October 2018")]),
    ("q43", "temporal",
     "Which came first: Sam calling himself Bruce or Sam naming his modern-day hero?",
     "calling himself Bruce",
     [(S3, "Sunday, 21 October 2018"), (60, "I'm Bruce"), (S4, "Monday, 22 October 2018"),
      (88, "My modern day hero is John H Groberg")]),
    ("q44", "temporal", "At what time did the brothers' last chat start?",
     "1:08 am on 2 November", [(S9, "Friday, 2 November 2018, 1:08 am")]),
    # --- two or more messages together
    ("q45", "multihop", "In which film did the lead actor of The Good Doctor act as a kid?",
     "August Rush",
     [(41, "We put on August Rush last night"),
      (45, "The actor from that movie is now the main guy in ABC's The Good Doctor")]),
    ("q46", "multihop", "What name from Kyle's childhood email address is still his Apple ID?",
     "turtle man",
     [(64, "You can be turtle man"), (65, "That was my email address as a kid"),
      (66, "that turtle man email address"), (67, "I only have it as my apple id")]),
    ("q47", "multihop", "Who was in second place in the chat challenge behind Kyle?", "Dexter",
     [(91, "But Dexter started chatting again so I just want to keep my lead"),
      (100, "if dexter starts getting a lot of points"),
      (103, "It's just that he is in second place")]),
    ("q48", "multihop", "Where is the roommate with a car, whom Sam hangs out with, from?",
     "Idaho Falls",
     [(52, "he's also from Idaho falls"),
      (72, "My room mate that I actually hang out with has a car")]),
    ("q49", "multihop", "What is the class with guest lectures from doctors that Sam will take?",
     "intro to medical professions",
     [(188, "a bunch of guest lectures from different types of doctors"),
      (328, "my intro to medical professions class next semester")]),
    ("q50", "multihop", "Which amusement park do both brothers like best?", "Six Flags",
     [(217, "Probably six flags"), (218, "My favorite amusement park is six flags")]),
    ("q51", "multihop", "Why does Sam say Planet Fitness is bad?",
     "it has no power lifting racks",
     [(285, "don't get a membership at planet fitness"),
      (287, "they don't have actual power lifting racks")]),
    ("q52", "multihop", "Who teaches Kyle to lift, and where did Sam meet him?",
     "Kelley, at a dinner",
     [(276, "My friend Kelley is teaching me how to lift better"),
      (277, "kelly is one of the people we had dinner with right?"), (278, "Yeah the Asian one")]),
    ("q53", "multihop", "What grade does Kyle have in the class he called his hardest?",
     "about 66%",
     [(95, "My hardest class is probably Biochemistry"), (144, "66% in the class")]),
    ("q54", "multihop", "How does each brother want to pay for his medical or dental school?",
     "Kyle through WICHE, Sam through the military",
     [(15, "western interstate commission for higher education"),
      (20, "I kind of want to do the military route")]),
    # --- decisions with their reasons
    ("q55", "decision", "Why did Kyle not take the military route to pay for dental school?",
     "Taylor didn't want to move around a lot",
     [(19, "Taylor didn't want to move around a lot")]),
    ("q56", "decision", "Why does WICHE suit Kyle's family?", "they plan to live in Arizona anyway",
     [(17, "Since we are already planning on living in AZ, it works out")]),
    ("q57", "decision", "Why would Kyle not give the iPad to Oliver?",
     "so he doesn't get addicted to technology",
     [(99, "we don't want him to be addicted to technology")]),
    ("q58", "decision", "What did Sam choose to do at 7 on 1 November instead of the gym?",
     "go to the basketball game",
     [(295, "im going to the basketball game with some friends at 7")]),
    ("q59", "decision", "Why is Sam taking classes that don't build on each other now?",
     "so he is not lost after his mission",
     [(328, "my mission"), (332, "ill be lost when")]),
    # --- things that got settled later
    ("q60", "resolved", "Did the convoy come to pick Sam up on 21 October?", "yes",
     [(62, "I hope the convoy arrives soon"), (68, "Ok he just arrived")]),
    ("q61", "resolved", "Who wrote the Moonlight Sonata, as Kyle told Sam?", "Beethoven",
     [(4, "hes got nothing on moonlight sonata"),
      (5, "Moonlight Sonata was totally Beethoven")]),
    ("q62", "resolved", "Does Kyle have a dirt bike?", "no",
     [(211, "Except you do have a dirbike"), (212, "I do? No I dont."),
      (215, "I meant don't haha")]),
    ("q63", "resolved", "Which AI did Sam finally think the chat challenge was for?",
     "their own AI called Eve",
     [(261, "if alexa is going to adopt conservative values"),
      (265, "I think it's for their own AI called eve")]),
]

# (id, topic, keywords, opened, resolved)
THREADS = [
    ("t_convoy", "the ride coming to pick Sam up", ["convoy"], 61, 68),
    ("t_schedule", "Sam's waitlisted classes", ["waitlist", "wait list", "schedule"], 178, 196),
    ("t_alexa", "whom the chat challenge is for", ["alexa", "eve"], 261, 265),
]


# Other lines that state a question's answer again (its `restated`), each with a phrase it
# contains: a line later in the chat that says the answer as the evidence does. A reply that
# only echoes or implies it is not one.
RESTATED: dict[str, Evidence] = {
    "q07": [
        (61, "Oh I see. Bruce."),
        (62, "that's a Bruce thing to do"),
        (64, "you can't go to the gym once and claim Bruce status"),
    ],
    "q11": [
        (120, "majored in dietetics that went to Med school"),
        (125, "do a dietetics major instead of a exercise science majo"),
    ],
}


def _local(stamp: str) -> datetime:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    if moment >= MDT_ENDS:
        raise SystemExit(f"{stamp}: after the end of summer time; PROVO no longer applies")
    return moment.astimezone(PROVO)


def _heading(moment: datetime, prompt: str) -> str:
    hour = moment.hour % 12 or 12
    when = (
        f"{DAYS[moment.weekday()]}, {moment.day} {MONTHS[moment.month - 1]} {moment.year}, "
        f"{hour}:{moment.minute:02d} {'am' if moment.hour < 12 else 'pm'}"
    )
    return f'*{when}. Chat prompt: "{prompt}"*'


def messages_of(conversations: dict[str, Any]) -> list[dict[str, Any]]:
    """One message per turn, chats in time order, each chat opened by its date and prompt."""
    chats = sorted(conversations.values(), key=lambda c: c["messages"][0][0]["timestamp"])
    messages: list[dict[str, Any]] = []
    for session, chat in enumerate(chats, start=1):
        for turn_number, turn in enumerate(chat["messages"]):
            senders = {line["sender"] for line in turn}
            if len(senders) != 1 or not senders <= {KYLE, SAM}:
                raise SystemExit(f"chat {session}: a turn with senders {sorted(senders)}")
            moment = _local(turn[0]["timestamp"])
            text = "\n".join(line["text"] for line in turn)
            if turn_number == 0:
                text = f"{_heading(moment, chat['prompt'])}\n{text}"
            user = senders == {SAM}
            messages.append(
                {
                    "id": len(messages) + 1,
                    "role": "user" if user else "character",
                    "speaker": USER["name"] if user else CHARACTER["name"],
                    "text": text,
                    "session": session,
                    "time": moment.isoformat(),
                }
            )
    return messages


def build() -> dict[str, Any]:
    source = json.loads(SOURCE.read_text(encoding="utf-8"))
    messages = messages_of(source["conversations"])
    firsts: dict[int, int] = {}
    for message in messages:
        firsts.setdefault(message["session"], message["id"])
    if list(firsts.values()) != [S1, S2, S3, S4, S5, S6, S7, S8, S9]:
        raise SystemExit(f"the chats start at messages {list(firsts.values())}, not at S1..S9")

    def evidence(qid: str, cited: Evidence) -> list[int]:
        for mid, phrase in cited:
            if not 1 <= mid <= len(messages) or phrase not in messages[mid - 1]["text"]:
                raise SystemExit(f"{qid}: message {mid} does not contain {phrase!r}")
        return sorted({mid for mid, _ in cited})

    def question(qid: str, kind: str, text: str, answer: str, cited: Evidence) -> dict[str, Any]:
        record: dict[str, Any] = {
            "id": qid,
            "kind": kind,
            "question": text,
            "answer": answer,
            "evidence": evidence(qid, cited),
        }
        if qid in RESTATED:
            again = evidence(qid, RESTATED[qid])
            for mid in again:
                if mid in record["evidence"]:
                    raise SystemExit(f"{qid}: #{mid} is its evidence, not a restatement")
                if not answer_words(answer, [messages[mid - 1]["text"]]).any_there:
                    raise SystemExit(f"{qid}: the restatement #{mid} holds no word of {answer!r}")
            record["restated"] = again
        return record

    return {
        "title": "Kyle and Sam: nine chats of the Chit-Chat Challenge",
        "about": (
            "A real conversation nobody here wrote: nine online chats between two brothers at "
            "Brigham Young University, 19 October to 2 November 2018, from the BYU PCC lab's "
            "Chit-Chat Challenge dataset (PyPI chitchat-dataset 0.9.0). The text is as typed; "
            "each chat opens with its date (Provo time) and prompt as narration. Built by "
            "assets/eval/make_chitchat.py from chitchat_source.json."
        ),
        "license": "MIT, Copyright (c) 2019 Perception, Control and Cognition Lab (BYU)",
        "character": CHARACTER,
        "user": USER,
        "messages": messages,
        "questions": [question(*entry) for entry in QUESTIONS],
        "threads": [
            {"id": tid, "topic": topic, "keywords": keywords, "opened": opened,
             "resolved": resolved}
            for tid, topic, keywords, opened, resolved in THREADS
        ],
    }


def extract(dataset: Path) -> None:
    """Write the brothers' chats from the package's dataset.json to chitchat_source.json."""
    everything = json.loads(dataset.read_text(encoding="utf-8"))
    chats = {
        key: chat
        for key, chat in everything.items()
        if {line["sender"] for turn in chat["messages"] for line in turn} == {KYLE, SAM}
    }
    source = {
        "about": (
            "The chats between two participants of the BYU PCC lab's Chit-Chat Challenge, "
            "exactly as dataset.json of the PyPI package chitchat-dataset 0.9.0 has them "
            "(https://github.com/BYU-PCCL/chitchat-dataset); make_chitchat.py --extract."
        ),
        "license": LICENSE,
        "conversations": chats,
    }
    SOURCE.write_text(json.dumps(source, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {SOURCE.name}: {len(chats)} chats")


LICENSE = """MIT License

Copyright (c) 2019 Perception, Control and Cognition Lab

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""


if __name__ == "__main__":
    if sys.argv[1:2] == ["--extract"] and len(sys.argv) == 3:
        extract(Path(sys.argv[2]))
    elif len(sys.argv) > 1:
        raise SystemExit(f"usage: {Path(__file__).name} [--extract PATH/TO/dataset.json]")
    dataset = build()
    OUT.write_text(json.dumps(dataset, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(
        f"wrote {OUT.name}: {len(dataset['messages'])} messages in "
        f"{dataset['messages'][-1]['session']} chats, {len(dataset['questions'])} questions, "
        f"{len(dataset['threads'])} threads"
    )
