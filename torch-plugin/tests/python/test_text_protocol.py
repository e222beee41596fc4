"""The C conventions as _lib.Library reads them, against C functions written in Python.

ctypes callbacks stand in for the library's functions, so the snprintf protocol (length
first, then a buffer of length + 1, truncation with a NUL, text that grows between the two
calls) and the error codes are exercised through real C pointers without the .so.
"""

import ctypes
import re
import types
import unittest

import support  # noqa: F401  (puts the package on sys.path)

import blockpool_torch
from blockpool_torch import _lib

TEXT_FN = ctypes.CFUNCTYPE(ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t)


def snprintf_like(texts, log):
    """A C function writing texts[i] on its i-th call (the last one from then on), as
    blockpool's text functions do; ``log`` gets each call's buf_len."""
    calls = [0]

    def write(buf, buf_len):
        text = texts[min(calls[0], len(texts) - 1)].encode("utf-8")
        calls[0] += 1
        log.append(buf_len)
        if buf_len > 0:
            count = min(len(text), buf_len - 1)
            ctypes.memmove(buf, text, count)
            buf[count] = b"\0"
        return len(text)

    return TEXT_FN(write)


def failing(code):
    return TEXT_FN(lambda buf, buf_len: code)


def library_with_last_error(message):
    library = object.__new__(_lib.Library)
    log = []
    library.cdll = types.SimpleNamespace(blockpool_last_error=snprintf_like([message], log))
    return library


class TextProtocolTest(unittest.TestCase):
    def test_length_query_then_fill(self):
        log = []
        library = library_with_last_error("")
        text = library.text(snprintf_like(['{"num_ooms": 0}'], log))
        self.assertEqual(text, '{"num_ooms": 0}')
        self.assertEqual(log, [0, 16], "one (NULL, 0) query, then length + 1 for the NUL")

    def test_text_that_grew_between_calls_is_asked_for_again(self):
        log = []
        library = library_with_last_error("")
        text = library.text(snprintf_like(["short", "now a longer text", "now a longer text"], log))
        self.assertEqual(text, "now a longer text", "a truncated answer must not be returned")
        self.assertEqual(log, [0, 6, 18])

    def test_empty_text(self):
        log = []
        self.assertEqual(library_with_last_error("").text(snprintf_like([""], log)), "")

    def test_non_ascii_text(self):
        log = []
        text = library_with_last_error("").text(snprintf_like(["site «attn» 1 µs"], log))
        self.assertEqual(text, "site «attn» 1 µs")

    def test_negative_codes_raise_their_class_with_last_errors_words(self):
        cases = {
            -1: blockpool_torch.InvalidArgumentError,
            -2: blockpool_torch.NoSuchDeviceError,
            -3: blockpool_torch.BackendError,
            -4: blockpool_torch.OutOfMemoryError,
            -5: blockpool_torch.SnapshotWriteError,
            -6: blockpool_torch.UnknownPointerError,
            -7: blockpool_torch.UnknownHandleError,
            -8: blockpool_torch.PanicError,
            -99: blockpool_torch.BlockpoolError,
        }
        library = library_with_last_error("device 7 is not one of the 1 devices")
        for code, cls in cases.items():
            with self.subTest(code=code):
                with self.assertRaises(cls) as caught:
                    library.text(failing(code))
                self.assertEqual(caught.exception.code, code)
                self.assertEqual(str(caught.exception), "device 7 is not one of the 1 devices")
                self.assertIsInstance(caught.exception, RuntimeError)
        self.assertTrue(issubclass(blockpool_torch.SnapshotWriteError, OSError))
        self.assertTrue(issubclass(blockpool_torch.NoSuchDeviceError, ValueError))

    def test_a_failure_without_words_still_says_its_code(self):
        with self.assertRaises(blockpool_torch.PanicError) as caught:
            library_with_last_error("").check(-8)
        self.assertIn("-8", str(caught.exception))

    def test_every_header_function_is_declared_with_its_parameter_count(self):
        path = support.os.path.join(support.PLUGIN_DIR, "include", "blockpool_torch.h")
        with open(path) as header:
            text = re.sub(r"/\*.*?\*/", "", header.read(), flags=re.S)
        prototypes = re.findall(r"\b(blockpool_\w+)\s*\(([^)]*)\)\s*;", text)
        parameters = {
            name: 0 if params.strip() in ("", "void") else len(params.split(","))
            for name, params in prototypes
        }
        self.assertEqual(
            set(parameters), set(_lib.SIGNATURES), "argtypes must cover the header exactly"
        )
        for name, (_, argtypes) in _lib.SIGNATURES.items():
            self.assertEqual(
                len(argtypes), parameters[name], f"{name}: argtypes disagree with the header"
            )


if __name__ == "__main__":
    unittest.main()
