-- mod_addressing.lua: XEP-0033 (Extended Stanza Addressing) for Prosody 0.12, loaded by
-- `scripts/testbed up --xmpp prosody` from the bed's private plugin_paths.
--
-- Part of spate (MIT OR Apache-2.0). This is spate's own module. The community module of
-- the same name in prosody-modules is not in Debian's prosody-modules package. This one
-- behaves the same way, so a measurement against it stands for a Prosody that runs that
-- module:
--   * A message or presence from a local client that carries
--     <addresses xmlns='http://jabber.org/protocol/address'> gets one copy for every
--     address of type to, cc or bcc that is not yet delivered='true'.
--   * In the copies, to/cc entries are marked delivered='true', so nobody expands the list
--     a second time, and bcc entries are removed (XEP-0033 §4.6). Other entries (replyto,
--     noreply, uri addresses, ...) are passed on untouched.
--   * Sent to the host JID (the multicast service), the stanza is consumed. Sent to a
--     user, it is expanded and then also delivered to that user as usual.
--   * Error stanzas are never expanded.
--   * The host adds the feature to its disco#info, so the host JID is the multicast
--     service.
-- There are no limits on the number of addresses other than Prosody's stanza size limit
-- (c2s_stanza_size_limit, 256 KiB by default: about 5 000 addresses).
--
-- One stanza object is re-addressed and sent once per destination instead of being
-- cloned. Prosody serialises a stanza when it hands it to a local session, so the copies
-- do not interfere. A clone per destination would cost O(n²) for an n-address list, and
-- that cost would show up in a measurement as server cost.

local jid_prep = require "util.jid".prep;

local xmlns_address = "http://jabber.org/protocol/address";
local expanded = { to = true, cc = true, bcc = true };

local function expand(event)
	local origin, stanza = event.origin, event.stanza;
	if stanza.attr.type == "error" or origin.type ~= "c2s" then
		return;
	end
	local addresses = stanza:get_child("addresses", xmlns_address);
	if not addresses then
		return;
	end
	local destinations = {};
	addresses:maptags(function (address)
		local attr = address.attr;
		if address.name ~= "address" or attr.xmlns ~= xmlns_address
			or not expanded[attr.type] or attr.delivered == "true" or not attr.jid then
			return address;
		end
		local to = jid_prep(attr.jid);
		if not to then
			return address; -- malformed: left as it was, not delivered
		end
		destinations[#destinations + 1] = to;
		if attr.type == "bcc" then
			return nil;
		end
		attr.delivered = "true";
		return address;
	end);
	local addressed_to = stanza.attr.to;
	for i = 1, #destinations do
		stanza.attr.to = destinations[i];
		module:send(stanza);
	end
	stanza.attr.to = addressed_to;
	if addressed_to == module.host then
		return true; -- for the service itself: consumed
	end
end

for _, kind in ipairs({ "message", "presence" }) do
	for _, to in ipairs({ "host", "bare", "full" }) do
		module:hook(kind .. "/" .. to, expand, 10);
	end
end

module:add_feature(xmlns_address);
