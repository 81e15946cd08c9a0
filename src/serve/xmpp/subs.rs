//! Rosters built from presence subscriptions (`spate serve --xmpp-roster subscriptions`,
//! RFC 6121 §3): a request (`subscribe`) marks the item as asked, an approval
//! (`subscribed`) gives the contact a `from` and the requester a `to`, `unsubscribe` and
//! `unsubscribed` take them back. Broadcast presence then goes to the sender's own
//! resources and to the contacts subscribed to it (`from`), as a real server does, and a
//! roster get lists the items with their subscription. Kept in memory, like registrations.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

/// One roster item's state, from its owner's side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Item {
    /// The contact is subscribed to the owner's presence.
    pub from: bool,
    /// The owner is subscribed to the contact's presence.
    pub to: bool,
    /// The owner asked for a subscription that is not answered yet.
    pub ask: bool,
}

impl Item {
    pub fn subscription(self) -> &'static str {
        match (self.from, self.to) {
            (true, true) => "both",
            (true, false) => "from",
            (false, true) => "to",
            (false, false) => "none",
        }
    }
}

/// Every account's roster, by bare JID (lowercased), each by contact bare JID.
#[derive(Debug, Default)]
pub(crate) struct Rosters(Mutex<HashMap<String, BTreeMap<String, Item>>>);

impl Rosters {
    /// `user` sent a presence of type `kind` to `contact`; true when it is a subscription
    /// stanza (applied, and to be passed on to the contact).
    pub fn apply(&self, user: &str, kind: &str, contact: &str) -> bool {
        if user == contact {
            return false;
        }
        let mut m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut item = |owner: &str, other: &str, f: &dyn Fn(&mut Item)| {
            f(m.entry(owner.to_string())
                .or_default()
                .entry(other.to_string())
                .or_default())
        };
        match kind {
            "subscribe" => item(user, contact, &|i| i.ask = true),
            "subscribed" => {
                item(user, contact, &|i| i.from = true);
                item(contact, user, &|i| {
                    i.to = true;
                    i.ask = false;
                });
            }
            "unsubscribe" => {
                item(user, contact, &|i| {
                    i.to = false;
                    i.ask = false;
                });
                item(contact, user, &|i| i.from = false);
            }
            "unsubscribed" => {
                item(user, contact, &|i| i.from = false);
                item(contact, user, &|i| {
                    i.to = false;
                    i.ask = false;
                });
            }
            _ => return false,
        }
        true
    }

    /// The local parts of the contacts on `domain` subscribed to `user`'s presence.
    pub fn subscribers(&self, user: &str, domain: &str) -> HashSet<String> {
        let m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        m.get(user)
            .into_iter()
            .flatten()
            .filter(|(_, i)| i.from)
            .filter_map(|(jid, _)| {
                let (local, d) = jid.split_once('@')?;
                (d == domain).then(|| local.to_string())
            })
            .collect()
    }

    /// `user`'s roster, sorted by contact.
    pub fn items(&self, user: &str) -> Vec<(String, Item)> {
        let m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        m.get(user)
            .map(|r| r.iter().map(|(j, i)| (j.clone(), *i)).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_and_its_approval_make_from_and_to() {
        let r = Rosters::default();
        assert!(r.apply("a@x", "subscribe", "b@x"));
        assert_eq!(
            r.items("a@x")[0].1,
            Item {
                ask: true,
                ..Item::default()
            }
        );
        assert!(r.subscribers("b@x", "x").is_empty());
        assert!(r.apply("b@x", "subscribed", "a@x"));
        assert_eq!(r.items("a@x")[0].1.subscription(), "to");
        assert_eq!(r.items("b@x")[0].1.subscription(), "from");
        assert_eq!(r.subscribers("b@x", "x"), HashSet::from(["a".to_string()]));
        // The other way round too: both.
        r.apply("b@x", "subscribe", "a@x");
        r.apply("a@x", "subscribed", "b@x");
        assert_eq!(r.items("a@x")[0].1.subscription(), "both");
        assert!(!r.items("b@x")[0].1.ask);
        // Contacts on another domain get no broadcast from this one.
        assert!(r.subscribers("b@x", "y").is_empty());
        r.apply("a@x", "unsubscribe", "b@x");
        assert_eq!(r.items("a@x")[0].1.subscription(), "from");
        assert!(r.subscribers("b@x", "x").is_empty());
        r.apply("a@x", "unsubscribed", "b@x");
        assert_eq!(r.items("a@x")[0].1.subscription(), "none");
        // Not a subscription stanza, or to oneself: nothing happens.
        assert!(!r.apply("a@x", "probe", "b@x"));
        assert!(!r.apply("a@x", "subscribe", "a@x"));
    }
}
