"""Form fields that take a burst of keys in the order they were typed.

Textual inserts a printable key the moment the focused Input reads it, but
runs a key *binding* — Backspace, Delete, End, Home, ←, → of the field, a
checkbox's space, a screen's enter — only after the key has bubbled from the
focused widget up to the app, one message queue per container on the way
(field → grid → dialog → screen → app), and the app then looks the binding up
from whatever holds the focus *by then*. Keys that arrive together (a
terminal delivers a fast typist's or a script's keys in one read) are all
forwarded before the first binding has made that trip, so:

- the digits after a Backspace are inserted first and the Backspace then
  deletes one of them. Measured in tmux on the tune modal: ``20`` + Backspace
  5 stayed ``20`` (``205``, then the Backspace); ``64`` (selected on focus) +
  End BS BS 6 4 ended empty (6 and 4 replaced the selection, then End, BS, BS);
- a key pressed on one field is run on the next one when a Tab moved the
  focus meanwhile.

``KeysInOrder`` runs the bindings of the widget a key reached, and of its
containers up to its screen, as the key reaches it, in that widget's own
queue, in order with the characters typed around it; the key then goes no
further. A screen whose fields use it binds Tab with ``priority`` (run as the
app reads the key), so the keys after a Tab reach the next field.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class KeysInOrder:
    """Mixin for a focusable widget: a key it does not type in runs the binding it would have run, at once."""

    async def _on_key(self, event: events.Key) -> None:
        if event.is_printable and self.check_consume_key(event.key, event.character):
            return  # the widget's own handler (Textual calls each class's in turn) types it in
        node = self
        while node is not None:
            for binding in node._bindings.key_to_bindings.get(event.key, ()):
                if not binding.priority and await self.app.run_action(binding.action, node):
                    event.stop()
                    return
            if node.is_modal:  # Textual looks no further than a modal screen either
                break
            node = node.parent
        event.stop()  # nothing here answers it: it must not reach the app and act on a widget focused since


class OrderedInput(KeysInOrder, Input):
    """An Input whose editing and cursor keys act in order with the characters typed around them."""
