/** The panel's "This server's GPUs" section: each GPU's model, use and a sparkline of it (NVML). */

import { el } from './dom';
import { GpuDevice, GpuReport, gigabytes, sparklinePoints } from './model';

const SVG = 'http://www.w3.org/2000/svg';

export function sparkline(samples: number[], width = 120, height = 24): SVGSVGElement {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'jp-ComputeHub-sparkline');
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('aria-hidden', 'true'); // the utilisation is in the text beside it
  svg.setAttribute('focusable', 'false');
  const line = document.createElementNS(SVG, 'polyline');
  line.setAttribute('points', sparklinePoints(samples, width, height));
  svg.appendChild(line);
  return svg;
}

/** What the server extension's NVML sampling sees (``null``: not known yet). */
export function gpuSection(gpu: GpuReport | null | undefined): HTMLElement {
  const sec = el('section', 'jp-ComputeHub-gpus');
  sec.appendChild(el('h3', '', "This server's GPUs"));
  if (!gpu) {
    sec.appendChild(el('div', 'jp-ComputeHub-muted', 'Loading…'));
  } else if (!gpu.available || !gpu.devices.length) {
    sec.appendChild(el('div', 'jp-ComputeHub-muted jp-ComputeHub-nogpu', `No GPU visible: ${gpu.reason || 'none'}`));
  } else {
    for (const d of gpu.devices) {
      sec.appendChild(device(d));
    }
  }
  return sec;
}

function device(d: GpuDevice): HTMLElement {
  const row = el('div', 'jp-ComputeHub-gpu');
  row.dataset.index = String(d.index);
  row.appendChild(el('div', 'jp-ComputeHub-name', `GPU ${d.index}: ${d.name}`));
  const facts = [
    d.utilization === null ? 'util ?' : `${d.utilization}% util`,
    `${gigabytes(d.memory_used)}/${gigabytes(d.memory_total)} GB`,
    d.temperature === null ? '' : `${d.temperature} °C`,
    d.power_watts === null ? '' : `${Math.round(d.power_watts)}${d.power_limit_watts ? `/${Math.round(d.power_limit_watts)}` : ''} W`,
    `${d.processes.length} process${d.processes.length === 1 ? '' : 'es'}`
  ].filter(Boolean);
  row.appendChild(el('div', 'jp-ComputeHub-facts', facts.join(' · ')));
  if (d.history.length > 1) {
    row.appendChild(sparkline(d.history));
  }
  return row;
}

