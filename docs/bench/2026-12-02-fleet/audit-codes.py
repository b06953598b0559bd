# Lease and Event writes of eipd's ServiceAccount in the API server's audit log
# between two times (HH:MM:SS, UTC), by object (lock, heartbeat, event), verb
# and response code (a request refused before its body was read, 429, is
# 'unread'), with the lock and heartbeat answer times and the waits in the
# API server's priority-and-fairness queues.
# usage: python3 audit-codes.py <run dir>/audit.log FROM TO
import json, sys, collections, datetime
path, lo, hi = sys.argv[1:4]
def seconds(go):
    # A Go duration as the API server prints it: 2.2s, 39.7ms, 79.5µs, 120ns.
    for unit, f in (('ms', 1e-3), ('µs', 1e-6), ('ns', 1e-9), ('s', 1)):
        if go.endswith(unit):
            return float(go[:-len(unit)]) * f
    return float(go)
ts = lambda s: datetime.datetime.fromisoformat(s.replace('Z', '+00:00'))
codes, took, queued = collections.Counter(), collections.defaultdict(list), []
for line in open(path):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get('stage') != 'ResponseComplete':
        continue
    t = e['requestReceivedTimestamp'][11:19]
    if not lo <= t < hi:
        continue
    r = e.get('objectRef', {})
    if r.get('resource') == 'events':
        kind = 'event'
    elif r.get('resource') == 'leases':
        name = r.get('name', '')
        # A request refused before its body was read has no name.
        kind = 'lock' if name.startswith('eip-198') else 'heartbeat' if name.startswith('eip-node') else 'unread'
    else:
        continue
    if e['verb'] in ('watch', 'list'):
        continue
    codes[(kind, e['verb'], e.get('responseStatus', {}).get('code'))] += 1
    wait = e.get('annotations', {}).get('apiserver.latency.k8s.io/apf-queue-wait')
    if wait and kind != 'event':
        queued.append(seconds(wait))
    if kind in ('lock', 'heartbeat') and e['verb'] in ('create', 'update'):
        took[kind].append((ts(e['stageTimestamp']) - ts(e['requestReceivedTimestamp'])).total_seconds())
for k, v in sorted(codes.items()):
    print(*k, v)
queued.sort()
if queued:
    print('%d Lease requests waited in the API server\'s priority-and-fairness queues: median %.2f s, max %.2f s' % (len(queued), queued[len(queued) // 2], queued[-1]))
for k, v in sorted(took.items()):
    v.sort()
    print(k, 'writes answered in: median %.2f s, p90 %.2f s' % (v[len(v) // 2], v[int(len(v) * .9)]))
