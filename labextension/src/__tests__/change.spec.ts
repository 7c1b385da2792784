import { changesFrom, formatDuration, parseDuration, standing } from '../change';
import { Workload } from '../model';

function wl(over: Partial<Workload> = {}): Workload {
  return { id: 'w1', name: 'train', user: 'alice', queue: 'vision', kind: 'training', state: 'pending', ...over };
}

describe('the change form', () => {
  it('reads time limits as the command line does, and writes them back the same way', () => {
    expect(parseDuration('90m')).toBe(5400);
    expect(parseDuration(' 1h30m ')).toBe(5400);
    expect(parseDuration('2d')).toBe(172800);
    expect(parseDuration('600')).toBe(600);
    for (const bad of ['', 'soon', '0', '0m', '1x', '-5', 'h1']) {
      expect(parseDuration(bad)).toBeNull();
    }
    expect(formatDuration(5400)).toBe('1h30m');
    expect(formatDuration(7200)).toBe('2h');
    expect(formatDuration(45)).toBe('45s');
    expect(formatDuration(null)).toBe('');
    expect(parseDuration(formatDuration(93784))).toBe(93784);
  });

  it('asks only for what differs, and says what is wrong with a field', () => {
    const w = wl({ resources: { gpu: 4, memory: 1024 }, time_limit: 7200 });
    expect(changesFrom(w, '2', '2h')).toEqual({ resources: { gpu: 2 } });
    expect(changesFrom(w, '4', '30m')).toEqual({ time_limit: 1800 });
    expect(changesFrom(w, '1', '45m')).toEqual({ resources: { gpu: 1 }, time_limit: 2700 });
    expect(changesFrom(w, '4', '2h')).toMatch(/^Nothing to change/);
    expect(changesFrom(w, '1.5', '')).toBe('GPUs must be a whole number, not "1.5"');
    expect(changesFrom(w, '', 'tomorrow')).toBe('The time limit must look like 30m, 2h or 1h30m, not "tomorrow"');
    expect(changesFrom(wl({ resources: null }), '1', '')).toEqual({ resources: { gpu: 1 } });
  });

  it('says where a job would stand', () => {
    expect(standing({ position: 2, eta_seconds: 600 })).toBe('#2 in line, starts ~10 min');
    expect(standing({ position: 1, eta_seconds: 0 })).toBe('#1 in line, starts now');
    expect(standing({ position: 3, eta_seconds: null })).toBe('#3 in line, start unknown');
    expect(standing({ position: 1, eta_seconds: 3600, eta_earliest: true })).toBe('#1 in line, starts ≥ 1 h');
    expect(standing({ position: 1, eta_seconds: 0, eta_reason: 'now (if released now)' })).toBe(
      '#1 in line, starts now if released now'
    );
    expect(standing({ reason: 'only work in line (pending) has a place' })).toBe(
      'only work in line (pending) has a place'
    );
  });
});
