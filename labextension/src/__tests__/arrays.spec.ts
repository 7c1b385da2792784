import { collapseArrays, compactIndexes, taskIds, workloadName } from '../arrays';
import { Workload } from '../model';

function wl(over: Partial<Workload> = {}): Workload {
  return { id: 'w1', name: 'train', user: 'alice', queue: 'vision', kind: 'training', state: 'running', ...over };
}

function task(index: number, state: string): Workload {
  return wl({ id: `w${20 + index}`, name: 'sweep', state, array: { id: 'w20', index, size: 8, limit: 2 } });
}

describe('names', () => {
  it("names an array's task by its array and index, other work by its name or id", () => {
    const array = { id: 'w0000012', index: 3, size: 10, limit: 2 };
    expect(workloadName(wl({ array }))).toBe('train w0000012[3]');
    expect(workloadName(wl({ array, name: '' }))).toBe('w0000012[3]');
    expect(workloadName(wl({ array: null }))).toBe('train');
    expect(workloadName(wl({ name: '' }))).toBe('w1');
  });
});

describe('collapsed arrays', () => {
  it('writes runs of indexes as ranges', () => {
    expect(compactIndexes([0, 1, 2, 3, 7, 9, 10, 11])).toBe('0-3,7,9-11');
    expect(compactIndexes([5])).toBe('5');
    expect(compactIndexes([])).toBe('');
  });

  it("shows an array's waiting tasks of one state as one row, running ones and other work apart", () => {
    const ws = [task(0, 'running'), task(1, 'running'), task(2, 'pending'), wl({ id: 'w9', state: 'pending' }),
      task(3, 'pending'), task(4, 'held'), task(6, 'pending'), task(7, 'held')];
    const rows = collapseArrays(ws);
    expect(rows.map(r => [r.id, workloadName(r), r.state])).toEqual([
      ['w20', 'sweep w20[0]', 'running'],
      ['w21', 'sweep w20[1]', 'running'],
      ['w22', 'sweep w20[2-3,6]', 'pending'],
      ['w9', 'train', 'pending'],
      ['w24', 'sweep w20[4,7]', 'held']
    ]);
    expect(taskIds(rows[2])).toEqual(['w22', 'w23', 'w26']);
    expect(taskIds(rows[0])).toEqual(['w20']);
    expect(ws[2].waiting_tasks).toBeUndefined(); // the report itself is left as it was
  });
});
