//! Unit tests of the machine's rules, event by event.
