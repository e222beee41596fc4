//! Unit tests of the container, stack and memo opcodes on hand-assembled pickles: lists,
//! tuples, dicts and sets, marks, sharing through the memo, and the errors of misuse.

use std::sync::Arc;

use super::super::Value;
use super::tests::{dict, err4, int, list, ok4, s, tuple};
use super::{read, PickleError, ReadLimits};

#[test]
fn lists_are_built_by_append_appends_and_list() {
    assert_eq!(ok4(b"]"), list(vec![]));
    assert_eq!(ok4(b"]K\x01a"), list(vec![int(1)]));
    assert_eq!(
        ok4(b"](K\x01K\x02eK\x03a"),
        list(vec![int(1), int(2), int(3)])
    );
    assert_eq!(ok4(b"](e"), list(vec![]), "APPENDS of nothing");
    assert_eq!(
        read(b"(lp0\nI1\naI2\na.", &ReadLimits::default()),
        Ok(list(vec![int(1), int(2)]))
    );
    assert_eq!(ok4(b"(K\x01K\x02l"), list(vec![int(1), int(2)]));
}

#[test]
fn tuples_are_built_by_tuple1_to_3_and_tuple() {
    assert_eq!(ok4(b")"), tuple(vec![]));
    assert_eq!(ok4(b"K\x01\x85"), tuple(vec![int(1)]));
    assert_eq!(ok4(b"K\x01K\x02\x86"), tuple(vec![int(1), int(2)]));
    assert_eq!(
        ok4(b"K\x01K\x02K\x03\x87"),
        tuple(vec![int(1), int(2), int(3)])
    );
    assert_eq!(
        ok4(b"(K\x01K\x02K\x03K\x04t"),
        tuple((1..=4).map(int).collect())
    );
}

#[test]
fn dicts_are_built_by_setitem_setitems_and_dict_in_insertion_order() {
    assert_eq!(ok4(b"}"), dict(vec![]));
    assert_eq!(ok4(b"}K\x02K\x03s"), dict(vec![(int(2), int(3))]));
    assert_eq!(
        ok4(b"}(K\x02K\x03K\x01K\x04u"),
        dict(vec![(int(2), int(3)), (int(1), int(4))])
    );
    assert_eq!(
        read(b"(dp0\nI1\nI2\ns.", &ReadLimits::default()),
        Ok(dict(vec![(int(1), int(2))]))
    );
    assert_eq!(ok4(b"(K\x02K\x03d"), dict(vec![(int(2), int(3))]));
}

#[test]
fn a_repeated_dict_key_keeps_its_place_and_takes_the_last_value_as_in_python() {
    // pickle.loads(b'\x80\x04(K\x01\x88K\x02\x89G?\xf0...K\x03d.') == {1: 3, 2: False}:
    // True and 1.0 are the key 1.
    assert_eq!(
        ok4(b"(K\x01\x88K\x02\x89G?\xf0\x00\x00\x00\x00\x00\x00K\x03d"),
        dict(vec![(int(1), int(3)), (int(2), Value::Bool(false))])
    );
    // Past the linear scan, with the hash index: keys 0..20, then key 3 again.
    let mut body = b"}(".to_vec();
    for key in 0..20u8 {
        body.extend_from_slice(&[b'K', key, b'K', key]);
    }
    body.extend_from_slice(b"K\x03\x8c\x01xu");
    let Value::Dict(pairs) = ok4(&body) else {
        panic!("not a dict")
    };
    assert_eq!(pairs.len(), 20, "the repeated key must not add an entry");
    assert_eq!(
        pairs[3],
        (int(3), s("x")),
        "key 3 keeps its place and takes the new value"
    );
    // Strings compare by content, str never equals bytes.
    let Value::Dict(pairs) = ok4(b"}(\x8c\x01aK\x01\x8c\x01aK\x02C\x01aK\x03u") else {
        panic!("not a dict")
    };
    assert_eq!(
        pairs.as_slice(),
        &[(s("a"), int(2)), (Value::Bytes(b"a"[..].into()), int(3))]
    );
}

#[test]
fn sets_are_built_by_additems_and_frozenset_without_duplicates() {
    assert_eq!(ok4(b"\x8f"), Value::Set(Arc::new(vec![])));
    assert_eq!(
        ok4(b"\x8f(K\x01K\x02K\x01\x88\x90"),
        Value::Set(Arc::new(vec![int(1), int(2)]))
    );
    assert_eq!(
        ok4(b"(K\x01K\x01\x8c\x01a\x91"),
        Value::Set(Arc::new(vec![int(1), s("a")]))
    );
    // A frozenset is hashable, a set is not.
    assert_eq!(
        ok4(b"\x8f((K\x01\x91\x90"),
        Value::Set(Arc::new(vec![Value::Set(Arc::new(vec![int(1)]))]))
    );
    assert!(matches!(
        err4(b"\x8f(\x8f\x90"),
        PickleError::Unhashable { kind: "set", .. }
    ));
    assert!(matches!(
        err4(b"(K\x01\x91(K\x02\x90"),
        PickleError::WrongType {
            opcode: "ADDITEMS",
            found: "frozenset",
            ..
        }
    ));
}

#[test]
fn pop_pop_mark_and_dup_follow_cpython() {
    assert_eq!(ok4(b"K\x01K\x020"), int(1), "POP discards the top");
    assert_eq!(
        ok4(b"N(K\x01K\x021"),
        Value::None,
        "POP_MARK discards down to the mark"
    );
    assert_eq!(
        ok4(b"K\x01(0\x85"),
        tuple(vec![int(1)]),
        "POP on an empty fenced stack pops the mark"
    );
    assert_eq!(ok4(b"K\x012\x86"), tuple(vec![int(1), int(1)]), "DUP");
    assert!(matches!(
        err4(b"0"),
        PickleError::StackUnderflow { opcode: "POP", .. }
    ));
    assert!(matches!(
        err4(b"1"),
        PickleError::MissingMark {
            opcode: "POP_MARK",
            ..
        }
    ));
}

#[test]
fn opcodes_do_not_reach_below_the_last_mark() {
    assert_eq!(
        err4(b"K\x01(\x85"),
        PickleError::StackUnderflow {
            opcode: "TUPLE1",
            offset: 5,
            needed: 1,
            found: 0
        }
    );
    assert!(matches!(
        err4(b"](K\x01a"),
        PickleError::StackUnderflow {
            opcode: "APPEND",
            ..
        }
    ));
    assert!(matches!(
        err4(b"K\x01(2"),
        PickleError::StackUnderflow { opcode: "DUP", .. }
    ));
    assert!(matches!(
        err4(b"K\x01(q\x00"),
        PickleError::StackUnderflow {
            opcode: "BINPUT",
            ..
        }
    ));
    assert_eq!(
        read(b"\x80\x04K\x01(.", &ReadLimits::default()),
        Err(PickleError::StackUnderflow {
            opcode: "STOP",
            offset: 5,
            needed: 1,
            found: 0
        })
    );
}

#[test]
fn memo_opcodes_store_and_push_the_same_object() {
    for (name, body) in [
        ("MEMOIZE/BINGET", &b"]\x94h\x00\x86"[..]),
        ("BINPUT/BINGET", b"]q\x07h\x07\x86"),
        (
            "LONG_BINPUT/LONG_BINGET",
            b"]r\x00\x00\x01\x00j\x00\x00\x01\x00\x86",
        ),
        (
            "LONG_BINPUT at 2^32-1",
            b"]r\xff\xff\xff\xffj\xff\xff\xff\xff\x86",
        ),
        ("PUT/GET", b"]p3\ng3\n\x86"),
    ] {
        let Value::Tuple(pair) = ok4(body) else {
            panic!("{name}: not a tuple")
        };
        let (Value::List(a), Value::List(b)) = (&pair[0], &pair[1]) else {
            panic!("{name}: not two lists")
        };
        assert!(
            Arc::ptr_eq(a, b),
            "{name}: the memoized list must be shared, not copied"
        );
    }
    // Strings from the memo are shared too.
    let Value::Tuple(pair) = ok4(b"\x8c\x05frame\x94h\x00\x86") else {
        panic!("not a tuple")
    };
    let (Value::Str(a), Value::Str(b)) = (&pair[0], &pair[1]) else {
        panic!("not strs")
    };
    assert!(Arc::ptr_eq(a, b), "memoized strings must be shared");
}

#[test]
fn a_container_filled_after_it_was_memoized_is_seen_full_everywhere() {
    // L = []; memo[0] = L; T = (L,); memo[1] = T; L.append(7); result T == ([7],).
    assert_eq!(
        ok4(b"]q\x00h\x00\x85q\x010h\x00K\x07a00h\x01"),
        tuple(vec![list(vec![int(7)])])
    );
}

#[test]
fn memo_put_replaces_and_memoize_counts_entries_as_cpython() {
    // BINPUT 0 twice replaces; MEMOIZE then uses index 1 (one entry so far).
    assert_eq!(
        ok4(b"K\x01q\x00K\x02q\x00K\x03\x94h\x00h\x01\x86"),
        tuple(vec![int(2), int(3)])
    );
}

#[test]
fn wrong_container_types_are_named() {
    assert_eq!(
        err4(b"}Na"),
        PickleError::WrongType {
            opcode: "APPEND",
            offset: 4,
            expected: "a list",
            found: "dict"
        }
    );
    assert!(matches!(
        err4(b"](K\x01K\x02u"),
        PickleError::WrongType {
            opcode: "SETITEMS",
            expected: "a dict",
            found: "list",
            ..
        }
    ));
    assert!(matches!(
        err4(b"]e"),
        PickleError::MissingMark {
            opcode: "APPENDS",
            ..
        }
    ));
    assert_eq!(
        err4(b"(K\x01d"),
        PickleError::OddItemCount {
            opcode: "DICT",
            offset: 5,
            count: 1
        }
    );
    assert!(matches!(
        err4(b"}]Ns"),
        PickleError::Unhashable {
            opcode: "SETITEM",
            kind: "list",
            ..
        }
    ));
    // A tuple key is hashable.
    assert_eq!(ok4(b"})Ns"), dict(vec![(tuple(vec![]), Value::None)]));
}

#[test]
fn a_list_containing_itself_is_a_cycle_error() {
    let error = err4(b"]q\x00h\x00a");
    assert_eq!(
        error,
        PickleError::Cycle {
            kind: "list",
            offset: 2
        }
    );
    assert!(error.to_string().contains("contains itself"), "{error}");
    // d = {}; d[1] = (d,)
    assert_eq!(
        err4(b"}q\x00K\x01h\x00\x85s"),
        PickleError::Cycle {
            kind: "dict",
            offset: 2
        }
    );
}

#[test]
fn appends_setitems_and_additems_of_nothing_need_only_a_value_below_the_mark() {
    // CPython returns before looking at the target when there are no items.
    assert_eq!(ok4(b"}(e"), dict(vec![]));
    assert_eq!(ok4(b"K\x01(u"), int(1));
    assert_eq!(ok4(b"N(\x90"), Value::None);
    assert!(matches!(
        err4(b"(e"),
        PickleError::StackUnderflow {
            opcode: "APPENDS",
            ..
        }
    ));
    assert!(matches!(
        err4(b"N((u"),
        PickleError::StackUnderflow {
            opcode: "SETITEMS",
            ..
        }
    ));
}

#[test]
fn ints_at_the_edges_of_the_inline_slot_read_exactly() {
    // LONG1 of 8 bytes: -2^60 - 1, -2^60, 2^60 - 1, 2^60, i64::MIN, i64::MAX.
    for int in [
        -(1i64 << 60) - 1,
        -(1 << 60),
        (1 << 60) - 1,
        1 << 60,
        i64::MIN,
        i64::MAX,
    ] {
        let mut body = vec![0x8a, 8];
        body.extend_from_slice(&int.to_le_bytes());
        assert_eq!(
            ok4(&body),
            Value::Int(int),
            "{int} must survive the reader's packing"
        );
    }
}

#[test]
fn equal_string_keys_that_are_different_objects_keep_one_entry() {
    // {"ab": 1, "ab": 2} with two distinct "ab" strings, then an int key 1 and a True key,
    // which Python counts as equal too.
    let body = b"}(\x8c\x02abK\x01\x8c\x02abK\x02K\x01K\x03\x88K\x04u";
    assert_eq!(
        ok4(body),
        dict(vec![(s("ab"), int(2)), (int(1), int(4))]),
        "equal keys must replace the value, whatever object holds them"
    );
}

#[test]
fn a_container_held_twice_is_shared_and_one_held_once_is_moved_whole() {
    // [d, d, [1]] with d = {"k": [2]} memoized at 0.
    let body = b"](}\x94\x8c\x01k](K\x02esh\x00](K\x01ee";
    let Value::List(items) = ok4(body) else {
        panic!("the result must be a list")
    };
    let (Value::Dict(first), Value::Dict(second)) = (&items[0], &items[1]) else {
        panic!("the first two items must be dicts, got {items:?}")
    };
    assert!(
        Arc::ptr_eq(first, second),
        "a dict referenced twice must be one object"
    );
    assert_eq!(
        items[2],
        list(vec![int(1)]),
        "a list held once must arrive whole"
    );
}
