# A server_args.py in the shape of SGLang 8905cbd42f4a: annotated
# dataclass fields turned into options by add_cli_args_from_dataclass,
# plus a few manual add_argument calls. Written for arpatch's tests; not
# upstream code.
import argparse
import dataclasses
from typing import List, Optional

from sglang.srt.arg_groups.arg_utils import A, Arg, add_cli_args_from_dataclass


@dataclasses.dataclass
class ServerArgs:
    """Fields below become options.

    Example in a docstring, not a field:
        host: A[str, "The host."] = "127.0.0.1"
    """

    model_path: A[
        str,
        Arg(
            help="Where the weights are (a folder, or a hub id).",
            aliases=["--model"],
        ),
    ]
    tp_size: A[
        int,
        Arg(help="The tensor parallel size.", aliases=["--tensor-parallel-size"]),
    ] = 1
    speculative_algorithm: A[Optional[str], "Speculative algorithm: EAGLE, EAGLE3."] = None
    speculative_draft_model_path: A[
        Optional[str],
        Arg(
            help="The draft model, e.g. 'a/b' (path or id).",
            aliases=["--speculative-draft-model"],
        ),
    ] = None
    disable_custom_all_reduce: A[bool, "Use NCCL for every allreduce."] = False
    cuda_graph_bs: A[Optional[List[int]], "Batch sizes to capture."] = None
    json_list: A[Optional[List[str]], Arg(help="A JSON list.", type_parser=str)] = None
    enable_piecewise: A[
        bool,
        Arg(help="Piecewise graphs.", action=argparse.BooleanOptionalAction),
    ] = True
    draft_window: A[
        Optional[int],
        Arg(help="A window.", cli_name="--speculative-dflash-draft-window-size"),
    ] = None
    injected: A[Optional[str], Arg(help="Set from Python only.", no_cli=True)] = None
    plain_field: int = 3
    not_described: A[int, 5] = 0

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        parser.add_argument(
            "--stream-output",
            action=DeprecatedStoreTrueAction,
            dest="stream_output",
            help="[Deprecated] Use --incremental-streaming-output instead.",
        )
        parser.add_argument(
            "--config",
            type=str,
            help="Read options from a YAML file.",
        )


def not_a_field():
    other: A[int, "Not in the class."] = 1
