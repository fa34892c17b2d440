"""The chat screen's turns: what Enter, Esc, Ctrl+R and Ctrl+G ask for, and one reply streamed
into its message view (in a group, every reply of the run, one after another).

A turn runs in an async worker on the event loop: the engine generates on its own thread and
hands tokens over through asyncio, so this part only appends text (repainted at most every
50 ms) and the UI stays responsive however long the reply is.
"""

from __future__ import annotations

import logging

from textual import work
from textual.containers import VerticalScroll

from kotonia_tui.chat.events import ReplyDelta, TurnDone
from kotonia_tui.chat.groups import GroupRun
from kotonia_tui.chat.service import ChatService
from kotonia_tui.chat.turn import NO_REPLY, NOTHING_WRITTEN, Turn, TurnKind
from kotonia_tui.domain import MessageStatus, Role
from kotonia_tui.tui.literal import notify
from kotonia_tui.tui.screens.chat_base import AUTO_REPLIES, STOPPING, Ask, ChatParts
from kotonia_tui.tui.widgets.chat_input import ChatInput
from kotonia_tui.tui.widgets.message_view import MessageView

log = logging.getLogger(__name__)


class TurnActions(ChatParts):
    """Mixed into ChatScreen: sending, stopping, regenerating and continuing."""

    def on_chat_input_submitted(self, event: ChatInput.Submitted) -> None:
        event.stop()
        if self.streaming:
            notify(self, "A reply is still being written (Esc stops it).", severity="warning")
            return
        text = event.text
        if text.strip() or self.attachments:
            self.run_turn(Ask.SEND, text)
            return
        views = self._views()
        last = views[-1].message if views else None
        if last is None or last.role is not Role.CHARACTER:
            # An empty send answers a message of the user's left without a reply (a reply
            # stopped before its first word, a chat imported ending with the user).
            self.run_turn(Ask.ANSWER)
        else:
            notify(self, "Type a message first (Ctrl+R writes another version of the reply).")

    def action_cancel(self) -> None:
        if self.run is not None:
            self.run.stop()  # a group's run: this reply and the ones after it
        if self.turn is not None:
            self.turn.cancel()
            # Said at once: the engine stops after the batch of the prompt it is reading (or
            # the token it is writing), which can take a moment on a long prompt.
            self.kotonia.turn_status = STOPPING

    def action_go_on(self) -> None:
        """The turn waiting for a fold goes on without it (the fold lands on a later turn)."""
        if self.service is not None:
            self.service.go_on_without_fold(self.conv_id)

    def action_regenerate(self) -> None:
        self.run_turn(Ask.REGENERATE)

    def action_continue_reply(self) -> None:
        self.run_turn(Ask.CONTINUE)

    async def _start(self, service: ChatService, ask: Ask, text: str) -> Turn | None:
        """Ask the service for the turn; a sent message is shown once it is stored. In a group
        the turn is the first of a run (the others follow it: `_next_in_run`); None: nobody
        answers (manual order: the player picks with Alt+P)."""
        self.run, self._run_turns = None, None
        if ask is Ask.PICK:
            return await self._first_in_run(service.groups.reply(self.conv_id, text))
        if ask is Ask.AUTO:
            return await self._first_in_run(service.groups.auto(self.conv_id, AUTO_REPLIES))
        if ask is Ask.SEND and service.groups.is_group(self.conv_id):
            attached = tuple(digest for digest, _name in self.attachments)
            run = await service.groups.send(self.conv_id, text, attached)
            self.query_one(ChatInput).clear()
            self._set_attachments([])
            self._remove_empty_note()
            user = service.store.last_message(self.conv_id)
            if user is not None:
                await self.query_one("#log", VerticalScroll).mount(
                    MessageView(user, number=self._next_number())
                )
            first = await self._first_in_run(run)
            if first is None:
                notify(self, f"Pick who answers: {self._key_for('pick_speaker')}.")
            return first
        if ask is Ask.SEND:
            images = [digest for digest, _name in self.attachments]
            turn = await service.send(self.conv_id, text, images)
            # The user's message is stored: only now does the box empty.
            self.query_one(ChatInput).clear()
            self._set_attachments([])
            self._remove_empty_note()
            if turn.user_message is not None:
                await self.query_one("#log", VerticalScroll).mount(
                    MessageView(turn.user_message, number=self._next_number())
                )
            return turn
        if ask is Ask.ANSWER:
            if service.groups.is_group(self.conv_id):
                return await self._first_in_run(service.groups.answer(self.conv_id))
            return await service.answer(self.conv_id)
        if ask is Ask.REGENERATE:
            return await service.regenerate(self.conv_id)
        return await service.continue_reply(self.conv_id)

    async def _first_in_run(self, run: GroupRun) -> Turn | None:
        self.run, self._run_turns = run, run.__aiter__()
        return await self._next_in_run()

    async def _next_in_run(self) -> Turn | None:
        """The next reply of the group's run (after the last one ended), None at its end."""
        if self._run_turns is None:
            return None
        try:
            return await anext(self._run_turns)
        except StopAsyncIteration:
            self.run, self._run_turns = None, None
            return None

    @work(exclusive=True, group="turn")
    async def run_turn(self, ask: Ask, text: str = "") -> None:
        """A turn, and in a group every reply of its run, one after another."""
        turn: Turn | None = None
        try:
            while True:
                turn = await self._one_turn(ask, text, turn)
                if turn is None or self._run_turns is None:
                    return
        finally:
            self.run, self._run_turns = None, None
            self.runs_ended += 1

    async def _one_turn(self, ask: Ask, text: str, previous: Turn | None) -> Turn | None:
        """Stream one reply: the turn `ask` starts, or (after `previous`) the run's next."""
        service = self.service
        if service is None:
            notify(self, self.unavailable, title="Read only", severity="warning", timeout=10)
            return None
        log_view = self.query_one("#log", VerticalScroll)
        if not self._at_end:
            await self._reload()  # a page opened further back: the turn goes at the end
        self.streaming = True
        self.kotonia.turn_status = "preparing the prompt…"
        target: MessageView | None = None
        view: MessageView
        try:
            found = await self._start(service, ask, text) if previous is None else None
            if previous is not None:
                found = await self._next_in_run()
            if found is None:
                self.streaming = False
                self.kotonia.turn_status = ""
                if previous is None:
                    self.turns_ended += 1
                return None
            turn = found
            if turn.target is None:
                # A new reply (to a message just sent, or to one left without an answer).
                self._remove_empty_note()
                view = MessageView(
                    None, speaker=turn.setup.display_name, number=self._next_number()
                )
                await log_view.mount(view)
                view.start_stream()
            else:
                target = self._view_of(turn.target.id)
                if target is None:
                    await self._reload()
                    target = self._view_of(turn.target.id)
                assert target is not None
                view = target
                if turn.kind is TurnKind.REGENERATE:
                    count = max(1, len(turn.target.alternatives))
                    view.start_stream(note=f"writing version {count + 1}…")
                else:
                    view.start_stream(prefix=view.text, note="continuing…")
            log_view.anchor()
        except Exception as exc:
            # Nothing is lost: a new message's text stays in the box.
            log.warning("turn could not start: %s", exc)
            notify(self, str(exc), title="Not sent", severity="error", timeout=10)
            self.streaming = False
            self.kotonia.turn_status = ""
            if ask is Ask.SEND:
                await self._reload()
            self.turns_ended += 1
            return None

        self.turn = turn
        count = 0
        self.kotonia.turn_status = "writing… (Esc stops)"
        try:
            async for event in turn:
                if isinstance(event, ReplyDelta):
                    count += 1
                    view.append(event.text)
                    if count % 16 == 0 and not turn.stopping:
                        self.kotonia.turn_status = f"writing… {count} tokens (Esc stops)"
                elif isinstance(event, TurnDone):
                    self._finish(view, target, event)
        finally:
            if turn.done is None:
                # This worker was cancelled (the screen was closed, the app is quitting): the
                # service's turn stops and stores what it wrote.
                turn.interrupt("the chat was closed")
            self.turn = None
            self.turns_ended += 1
            self.streaming = False
            self.kotonia.turn_status = ""
            self.refresh_memory()
        return turn

    def _finish(self, view: MessageView, target: MessageView | None, done: TurnDone) -> None:
        if done.reply is not None:
            view.finish(done.reply)
            self.show_expression()
            if done.reply.status is MessageStatus.CUT and done.reply.status_reason:
                notify(self, done.reply.status_reason, title="Reply cut", severity="warning")
        elif target is not None:
            # Regenerate or continue stopped with nothing new: the stored reply stands.
            view.finish(view.message)
            if done.error:
                notify(self, done.error, title="No new version", severity="warning")
        elif done.error == NOTHING_WRITTEN:
            view.remove()
            notify(
                self, "Stopped before the first word. Enter on an empty box (or Ctrl+R) asks again."
            )
        elif done.error == NO_REPLY:
            view.remove()
            notify(self, NO_REPLY, title="No reply", severity="warning")
        else:
            view.finish(None, error=done.error or "the turn ended without a reply")
            if done.error:
                notify(
                    self, done.error, title="The model call failed", severity="error", timeout=10
                )
