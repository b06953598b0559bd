# Lock creates in the API server's audit log between two times (HH:MM:SS.mmm,
# UTC): by response code (429: refused before the body was read, so without
# a name), by the creating node's rank for the IP among all the nodes (the
# rendezvous order of internal/lease/rank.go), how many creates and how
# many nodes each IP drew, and the creates sent for an IP after its create
# had been answered 201: by the node it named, and by the others.
# usage: python3 lock-creates.py <run dir>/audit.log FROM TO NODES
import collections, ipaddress, json, re, sys
path, lo, hi, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
nodes = ['node-%d' % i for i in range(1, count + 1)]
M = (1 << 64) - 1
def score(ip, node):
    h = 0xcbf29ce484222325  # FNV-1a 64 of the address, a zero byte and the name
    for b in ipaddress.ip_address(ip).packed + b'\0' + node.encode():
        h = ((h ^ b) * 0x100000001b3) & M
    for k in (0xff51afd7ed558ccd, 0xc4ceb9fe1a85ec53):
        h ^= h >> 33
        h = (h * k) & M
    return h ^ (h >> 33)
def rank(ip, node):
    s = score(ip, node)
    return sum(1 for n in nodes if n != node and (score(ip, n), node) > (s, n))
codes, ranks, per = collections.Counter(), collections.Counter(), collections.defaultdict(list)
for line in open(path):
    e = json.loads(line)
    if e.get('stage') != 'ResponseComplete' or e['verb'] != 'create':
        continue
    if not lo <= e['requestReceivedTimestamp'][11:23] < hi:
        continue
    r = e.get('objectRef', {})
    if r.get('resource') != 'leases':
        continue
    name, code = r.get('name', ''), e.get('responseStatus', {}).get('code')
    if not name:
        codes['refused unread', code] += 1
        continue
    if not name.startswith('eip-198'):
        continue
    node = re.search(r'\((node-\d+)', e.get('userAgent', '')).group(1)
    rk = rank(name[4:].replace('-', '.'), node)
    codes['lock create', code] += 1
    ranks['rank %s' % (rk if rk < 3 else '3+'), code] += 1
    per[name].append((e['requestReceivedTimestamp'], e['stageTimestamp'], node, code))
for k, v in sorted(codes.items(), key=str):
    print(*k, v)
for k, v in sorted(ranks.items(), key=str):
    print(*k, v)
print('IPs', len(per))
print('creates per IP', sorted(collections.Counter(len(v) for v in per.values()).items()))
print('nodes per IP', sorted(collections.Counter(len({x[2] for x in v}) for v in per.values()).items()))
own, others = collections.Counter(), collections.Counter()
for v in per.values():
    won = sorted(x for x in v if x[3] == 201)
    if won:
        for x in v:
            if x[0] > won[0][1]:
                (own if x[2] == won[0][2] else others)[x[3]] += 1
print('sent after the IP\'s 201 by its creator', dict(own), 'by other nodes', dict(others))
