// A tidy tree layout: leaves take the next column, a parent sits over its children's middle.
// `parents[i]` is node i's parent index (null for roots); returns [{x, y}] in columns/levels.
export function treeLayout(parents) {
  const children = parents.map(() => []);
  const roots = [];
  parents.forEach((p, i) => (p === null || p === undefined ? roots.push(i) : children[p].push(i)));
  const pos = parents.map(() => ({ x: 0, y: 0 }));
  let column = 0;
  const place = (i, depth) => {
    pos[i].y = depth;
    if (!children[i].length) {
      pos[i].x = column++;
      return;
    }
    for (const c of children[i]) place(c, depth + 1);
    const xs = children[i].map((c) => pos[c].x);
    pos[i].x = (Math.min(...xs) + Math.max(...xs)) / 2;
  };
  for (const r of roots) place(r, 0);
  return pos;
}
