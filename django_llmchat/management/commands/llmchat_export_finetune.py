"""``manage.py llmchat_export_finetune [--chat ID ...] [--user USER ...] [--rating 1|-1]
[--format jsonl|json] [--output FILE]``: chats as OpenAI chat fine-tuning JSONL (one
conversation a line), or with ``--format json`` as one plain JSON array of transcripts
(see :mod:`django_llmchat.chats.export`)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from ...chats.export import filter_chats, finetune_lines, transcripts_json
from ._users import find_user


class Command(BaseCommand):
    help = (
        "Export chats as OpenAI chat fine-tuning JSONL (one conversation a line, tool calls "
        "and results included; turns rated thumbs-down get weight 0), or with --format json "
        "as one JSON array of transcripts (ids, parents, every message field, cost), to "
        "stdout or --output."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--chat", type=int, action="append", dest="chats", metavar="ID", help="A chat's id."
        )
        parser.add_argument(
            "--user",
            action="append",
            dest="users",
            metavar="USER",
            help="The chats of this user (username; a primary key with --pk).",
        )
        parser.add_argument("--pk", action="store_true", help="Each --user is a primary key.")
        parser.add_argument(
            "--rating",
            type=int,
            choices=(1, -1),
            help="Only chats with a reply rated so (1: thumbs up; -1: thumbs down).",
        )
        parser.add_argument(
            "--format",
            choices=("jsonl", "json"),
            default="jsonl",
            help="jsonl: fine-tuning examples (the default); json: plain transcripts.",
        )
        parser.add_argument("--output", "-o", help="Write to this file instead of stdout.")

    def handle(self, *args, chats=None, users=None, pk=False, rating=None, output=None, **opts):
        found = [find_user(name, pk=pk) for name in users] if users else None
        selected = filter_chats(chat_ids=chats, users=found, rating=rating)
        if opts.get("format") == "json":
            pieces = transcripts_json(selected)
            if output:
                with open(output, "w", encoding="utf-8") as fh:
                    fh.writelines(pieces)
                self.stderr.write(f"Wrote {selected.count()} chat(s) to {output}.")
            else:
                self.stdout.write("".join(pieces), ending="")
            return
        count = 0
        if output:
            with open(output, "w", encoding="utf-8") as fh:
                for line in finetune_lines(selected):
                    fh.write(line + "\n")
                    count += 1
            self.stderr.write(f"Wrote {count} conversation{'s' if count != 1 else ''} to {output}.")
            return
        for line in finetune_lines(selected):
            self.stdout.write(line)  # a newline after each
            count += 1
        if not count:
            self.stderr.write("No chat with a reply matched.")
