import {
  ChangeFields,
  changesFrom,
  fieldsOf,
  formatCpu,
  formatDuration,
  formatMemory,
  parseDuration,
  standing
} from '../change';
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

  it('shows memory and CPU as people write them', () => {
    expect(formatMemory(64 * 2 ** 30)).toBe('64Gi');
    expect(formatMemory(512 * 2 ** 20)).toBe('512Mi');
    expect(formatMemory(1536 * 2 ** 20)).toBe('1536Mi');
    expect(formatMemory(1000)).toBe('1000');
    expect(formatMemory(undefined)).toBe('');
    expect(formatCpu('2000m')).toBe('2');
    expect(formatCpu('500m')).toBe('500m');
    expect(formatCpu('0m')).toBe('');
    expect(formatCpu(undefined)).toBe('');
  });

  it('asks only for what differs, and says what is wrong with a field', () => {
    const w = wl({ resources: { gpu: 4, memory: 2 ** 30, cpu: '4000m' }, time_limit: 7200 });
    const as = (over: Partial<ChangeFields>) => changesFrom(w, { ...fieldsOf(w), ...over });
    expect(fieldsOf(w)).toEqual({ gpus: '4', cpu: '4', memory: '1Gi', limit: '2h', queue: 'vision', name: 'train' });
    expect(as({ gpus: '2' })).toEqual({ resources: { gpu: 2 } });
    expect(as({ limit: '30m' })).toEqual({ time_limit: 1800 });
    expect(as({ gpus: '1', limit: '45m' })).toEqual({ resources: { gpu: 1 }, time_limit: 2700 });
    expect(as({ cpu: '500m', memory: '64Gi' })).toEqual({ resources: { cpu: '500m', memory: '64Gi' } });
    expect(as({ queue: 'shared', name: 'train-2' })).toEqual({ queue: 'shared', name: 'train-2' });
    expect(as({ name: '' })).toEqual({ name: '' }); // a name taken away
    expect(as({ gpus: '', cpu: '', memory: '', limit: '' })).toMatch(/^Nothing to change/); // blank: as it is
    expect(as({})).toMatch(/^Nothing to change/);
    expect(as({ gpus: '1.5' })).toBe('GPUs must be a whole number, not "1.5"');
    expect(as({ cpu: 'lots' })).toBe('CPU must be a number of cores (2, 0.5) or millicores (500m), not "lots"');
    expect(as({ memory: '64GB!' })).toBe('Memory must look like 64Gi, 512Mi or a number of bytes, not "64GB!"');
    expect(as({ limit: 'tomorrow' })).toBe('The time limit must look like 30m, 2h or 1h30m, not "tomorrow"');
    const bare = wl({ resources: null });
    expect(changesFrom(bare, { ...fieldsOf(bare), gpus: '1' })).toEqual({ resources: { gpu: 1 } });
  });

  it('says where a job would stand', () => {
    expect(standing({ position: 2, eta_seconds: 600 })).toBe('#2 in line, starts ~10 min');
    expect(standing({ position: 1, eta_seconds: 0 })).toBe('#1 in line, starts now');
    expect(standing({ position: 3, eta_seconds: null })).toBe('#3 in line, start unknown');
    expect(standing({ position: 1, eta_seconds: 3600, eta_earliest: true })).toBe('#1 in line, starts ≥ 1 h');
    expect(standing({ position: 1, eta_seconds: 0, eta_reason: 'now (if released now)' })).toBe(
      '#1 in line, starts now if released now'
    );
    expect(standing({ reason: 'runs after w1 finishes', eta_seconds: 7200 })).toBe(
      'starts ~2 h once what it runs after ends'
    );
    expect(standing({ reason: 'runs after w1', eta_seconds: null, eta_reason: 'it runs only if w1 fails' })).toBe(
      'it runs only if w1 fails'
    );
    expect(standing({ reason: 'only work in line (pending) has a place' })).toBe(
      'only work in line (pending) has a place'
    );
  });
});
