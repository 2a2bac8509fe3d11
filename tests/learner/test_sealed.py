"""Arguments kept out of the trace, encrypted and apart (course_lib/sealed.py)."""

import pytest
from cryptography.fernet import Fernet

from course_lib.sealed import SealedStore

ARGUMENTS = {"to": "aiko.tanaka@example.com", "body": "Your order ORD-000042 has shipped."}


def test_what_is_kept_is_unreadable_on_disk_and_comes_back_whole_with_the_key(tmp_path):
    store = SealedStore(tmp_path, Fernet.generate_key())
    path = store.keep("call_4a21", ARGUMENTS)
    stored = path.read_bytes()
    assert b"aiko" not in stored and b"ORD-000042" not in stored
    assert store.open("call_4a21") == ARGUMENTS


def test_a_wrong_key_or_a_changed_file_is_an_error_not_a_guess(tmp_path):
    SealedStore(tmp_path, Fernet.generate_key()).keep("call_1", ARGUMENTS)
    with pytest.raises(ValueError, match="does not open it"):
        SealedStore(tmp_path, Fernet.generate_key()).open("call_1")
    key = Fernet.generate_key()
    store = SealedStore(tmp_path, key)
    path = store.keep("call_2", ARGUMENTS)
    token = bytearray(path.read_bytes())
    token[-10] = ord("A") if token[-10] != ord("A") else ord("B")
    path.write_bytes(bytes(token))
    with pytest.raises(ValueError, match="was changed"):
        store.open("call_2")


@pytest.mark.parametrize("call_id", ["../escape", "", "a/b", "x" * 65, "call\n1"])
def test_a_call_id_names_a_file_in_the_store_and_nothing_else(tmp_path, call_id):
    with pytest.raises(ValueError, match="a call id is"):
        SealedStore(tmp_path, Fernet.generate_key()).keep(call_id, ARGUMENTS)
