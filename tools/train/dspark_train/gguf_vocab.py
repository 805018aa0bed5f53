"""The tokenizer's GGUF metadata (llama.cpp `llama`/SPM vocabulary) from the SentencePiece model,
and the chat template every exported model carries (tokenizer.chat_template, chatml.jinja)."""
from pathlib import Path

from . import gguf_writer as gw
from . import tokenizer as tok

# llama_token_type as stored in tokenizer.ggml.token_type
TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_USER_DEFINED, TYPE_UNUSED, TYPE_BYTE = 1, 2, 3, 4, 5, 6

CHAT_TEMPLATE_KEY = "tokenizer.chat_template"
# ChatML (Qwen2.5's layout, a neutral default system prompt): tools in the system block and assistant
# calls as Hermes <tool_call> JSON, tool results as <tool_response>. The vocabulary has no
# <|im_start|>/<|im_end|> control tokens, so the markers are encoded as ordinary text.
CHATML_FILE = Path(__file__).with_name("chatml.jinja")


def read_template(path=CHATML_FILE) -> str:
    """A template file's text without its final newline (Jinja2 drops it too when rendering)."""
    text = Path(path).read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text


def chatml_template() -> str:
    return read_template(CHATML_FILE)


def vocab_arrays(sp):
    pieces, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        pieces.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            t = TYPE_UNKNOWN
        elif sp.is_control(i):
            t = TYPE_CONTROL
        elif sp.is_byte(i):
            t = TYPE_BYTE  # pieces are spelled <0x0A>, the form llama.cpp parses
        elif sp.is_unused(i):
            t = TYPE_UNUSED
        else:
            t = TYPE_NORMAL
        types.append(t)
    return pieces, scores, types


def add_tokenizer(w: gw.GGUFWriter, sp, chat_template: bool = True):
    pieces, scores, types = vocab_arrays(sp)
    w.add_str("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", gw.STRING, pieces)
    w.add_array("tokenizer.ggml.scores", gw.FLOAT32, scores)
    w.add_array("tokenizer.ggml.token_type", gw.INT32, types)
    w.add_u32("tokenizer.ggml.bos_token_id", tok.BOS_ID)
    w.add_u32("tokenizer.ggml.eos_token_id", tok.EOS_ID)
    w.add_u32("tokenizer.ggml.unknown_token_id", tok.UNK_ID)
    w.add_u32("tokenizer.ggml.mask_token_id", tok.MASK_ID)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    # The tokenizer was trained without a dummy prefix: text is not prefixed with a space.
    w.add_bool("tokenizer.ggml.add_space_prefix", False)
    if chat_template:
        w.add_str(CHAT_TEMPLATE_KEY, chatml_template())
