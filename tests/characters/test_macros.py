"""Card macros become names in everything sent to the model."""

from __future__ import annotations

from kotonia_tui.characters import apply_macros


def test_char_and_user_in_all_forms():
    text = "{{char}} meets {{user}}. {{Char}} and {{USER}}. <BOT> greets <USER>. {{ char }}"
    out = apply_macros(text, char="Mira", user="Sam")
    assert out == "Mira meets Sam. Mira and Sam. Mira greets Sam. Mira"


def test_angle_forms_are_case_sensitive():
    assert apply_macros("<user> <bot>", char="Mira", user="Sam") == "<user> <bot>"


def test_original_is_replaced_only_when_given():
    assert apply_macros("{{original}} More.", char="M", user="S", original="Base.") == (
        "Base. More."
    )
    assert apply_macros("{{original}}", char="M", user="S") == "{{original}}"


def test_substitution_is_one_pass():
    # A persona literally named "{{char}}" must not be expanded again.
    assert apply_macros("Hi {{user}}", char="Mira", user="{{char}}") == "Hi {{char}}"


def test_unknown_macros_are_left_alone():
    assert apply_macros("{{random:a,b}} {{time}}", char="M", user="S") == "{{random:a,b}} {{time}}"
