#!/usr/bin/env python3
# heartbeat-writes.py AUDITLOG: the heartbeat writes eipd made while the nodes
# joined (from the first heartbeat created to the last) and in the 30 s after
# the last, from the audit log of a run with -keep (<run dir>/audit.log, one
# line per request of eipd's ServiceAccount).
import collections, datetime, json, sys

def when(s):
    return datetime.datetime.fromisoformat(s.replace('Z', '+00:00'))

ev = []
for line in open(sys.argv[1]):
    e = json.loads(line)
    o = e.get('objectRef', {})
    if e.get('stage') != 'ResponseComplete' or o.get('resource') != 'leases' or not o.get('name', '').startswith('eip-node-'):
        continue
    if e['verb'] in ('create', 'update'):
        ev.append((when(e['requestReceivedTimestamp']), e['verb'], o['name']))
ev.sort()
creates = [t for t, v, _ in ev if v == 'create']
first, last = creates[0], creates[-1]
end = last
span = (end - first).total_seconds()
prev, quick, joining = {}, 0, 0
for t, v, n in ev:
    if first <= t < end and v == 'update':
        joining += 1
        quick += n in prev and (t - prev[n]).total_seconds() < 1
    prev[n] = t
after = [t for t, v, _ in ev if end <= t < end + datetime.timedelta(seconds=30) and v == 'update']
per_second = collections.Counter(int((t - end).total_seconds()) for t in after)
print(f"heartbeats created: {len(creates)}, from {first:%H:%M:%S} to {last:%H:%M:%S} ({(last - first).total_seconds():.0f} s)")
print(f"from the first create to the last: {joining} updates, {joining / span:.2f}/s; "
      f"{quick} of them less than 1 s after the same node's previous write")
print(f"the 30 s after the last create: {len(after)} updates, {len(after) / 30:.2f}/s; "
      f"at most {max(per_second.values(), default=0)} in one second, none in {30 - len(per_second)} of the 30")
