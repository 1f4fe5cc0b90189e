//! What a candidate sees of its own record in a store: one classification, from which
//! every store answers "is it still mine". A tenure goes on only while a read (or a
//! watch event) of its record sees it [`Seen::Ours`]: exactly the record this tenure
//! wrote (etcd: our key, at the create revision we placed, on our lease, holding our
//! identity; ZooKeeper: our node, of this very session, never rewritten; Redis and
//! each Redlock node: the lock key holding our value, or our member in the readers'
//! set, live, with no lock key beside it; a Kubernetes Lease: a record this process
//! wrote; the file store: the inode this process holds locked, still at the lock
//! file's path). A SQL store asks the same question in its statements (a renewal
//! updates only the row that holds our identity and token) and reads the answer as
//! the rows it changed. Gone and taken both end it; the classification keeps them apart for
//! whoever needs to tell them apart. A record reserved for the candidate (a Kubernetes
//! Lease handed to it) is none of these: it may take it.

/// A store's record, as one read or one watch event shows it to the candidate that
/// wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// No record: deleted, expired, or gone with its lease or session.
    Free,
    /// This tenure's record, as it wrote it.
    Ours,
    /// Someone else's in its place: another holder, lease, session, version or value.
    Another,
    /// Reserved for this candidate by someone else (a switchover's, or the store's own
    /// coordinator's hand-over, as a Kubernetes Lease names the holder it elected): it
    /// takes the record with a write of its own, a new tenure.
    Reserved,
}

impl Seen {
    /// A record that is ours when it is exactly `ours` (`found`: `None` when there is
    /// none).
    pub(super) fn of<T: PartialEq>(found: Option<T>, ours: T) -> Seen {
        match found {
            None => Seen::Free,
            Some(f) if f == ours => Seen::Ours,
            Some(_) => Seen::Another,
        }
    }

    /// Whether the tenure that wrote the record goes on.
    pub(super) fn still_ours(self) -> bool {
        self == Seen::Ours
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_record_as_we_wrote_it_is_ours() {
        assert_eq!(Seen::of(Some((5, "me")), (5, "me")), Seen::Ours);
        assert_eq!(Seen::of(Some((6, "me")), (5, "me")), Seen::Another);
        assert_eq!(Seen::of(Some((5, "you")), (5, "me")), Seen::Another);
        assert_eq!(Seen::of(None, (5, "me")), Seen::Free);
        assert!(Seen::Ours.still_ours());
        assert!(!Seen::Another.still_ours());
        assert!(!Seen::Free.still_ours());
        assert!(!Seen::Reserved.still_ours());
    }
}
