// Package wire judges whether a held IP is answered on the LAN by its
// holder alone, as seen from another node, and paces those checks.
//
// A node checks the IPs whose locks name it as successor: it would take
// them over anyway, so it is the node whose view of the wire matters
// next. A check is one ARP probe (IPv4) or duplicate address detection
// solicitation (IPv6) and the answers heard within a short wait; Judge
// turns those answers into a Verdict. Schedule decides which IP to check
// when, within a bounded rate; Report is what the checking node tells the
// others in its heartbeat, and changes only when a verdict does.
//
// Nothing here sends frames or touches the API: the agent sends the probes
// (netif) and writes the report with its heartbeat renewals.
package wire
