# A server_args.py in the shape of SGLang 84118acf50b3: explicit
# parser.add_argument calls. Written for arpatch's tests; not upstream code.
import argparse


class ServerArgs:
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        # Model (a comment with "--not-an-option" and a paren ( in it)
        parser.add_argument(
            "--model-path",
            "--model",
            type=str,
            help="Where the weights are (a folder, or a hub id).",
            required=True,
        )
        parser.add_argument(
            "--tensor-parallel-size",
            "--tp-size",
            type=int,
            default=1,
            help='The tensor parallel size, e.g. "--tp-size 8".',
        )
        parser.add_argument("--tp-rank-hint", action="store_true", help="A test-only flag.")
        parser.add_argument(
            "--speculative-algorithm",
            type=str,
            choices=["EAGLE", "EAGLE3"],
            help="Speculative algorithm.",
        )
        parser.add_argument(
            "--speculative-draft-model-path",
            "--speculative-draft-model",
            type=str,
            help="The draft model (path or id).",
        )
        parser.add_argument(
            "--speculative-draft-model-revision",
            type=str,
            default=None,
            help="""A revision, with "quotes" and (parens) inside."""
            "and a second part",
        )
        parser.add_argument(
            "--disable-custom-all-reduce",
            action="store_true",
            help="Use NCCL for every allreduce.",
        )
        parser.add_argument(
            "--lora-paths",
            type=str,
            nargs="*",
            action=LoRAPathAction,
            help="LoRA adapters.",
        )
        parser.add_argument(
            "--enable-tokenizer-batch-encode",
            action=DeprecatedStoreTrueAction,
            help="Deprecated.",
        )
