// The pure part; the live region itself (Announcer) is checked in a real browser (tests/labextension/test_a11y_lab.py).
import { announcement, announcements } from '../announce';
import { Workload } from '../model';

function w(over: Partial<Workload> = {}): Workload {
  return { id: 'w1', name: 'train', user: 'alice', queue: 'vision', kind: 'training', state: 'pending', ...over };
}

describe('announcement', () => {
  it('says where waiting work stands and why, without the ETA', () => {
    const text = announcement(
      w({ explanation: { position_in_queue: 2, queue_length: 5, reason: 'needs 2 × a100', eta_seconds: 600 } })
    );
    expect(text).toBe('train: waiting, position 2 of 5 in vision — needs 2 × a100');
  });

  it('names running work by its state only, and says why work ended', () => {
    expect(announcement(w({ state: 'running', reason: 'admitted on local GPU 1' }))).toBe('train: running');
    expect(announcement(w({ state: 'rejected', reason: 'too big', name: '' }))).toBe(
      'w1: rejected by an admin — too big'
    );
  });

  it("names an array's task with its index", () => {
    const array = { id: 'w0000012', index: 3, size: 4, limit: 0 };
    expect(announcement(w({ state: 'running', array }))).toBe('train w0000012[3]: running');
  });

  it('puts an outage first and waiting work before the rest', () => {
    const lines = announcements([w({ id: 'a', state: 'running' }), w({ id: 'b' })], 'ComputeHub is unreachable');
    expect([...lines.keys()]).toEqual(['service', 'b', 'a']);
  });
});
