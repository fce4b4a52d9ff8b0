package org.sparkdl.bridge;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;

/**
 * Where the time of each Spark job goes, for the benchmarks (bench/engine.py): per job, the stages in
 * order and, per stage, the summed task metrics. Registered with {@code SparkContext.addSparkListener}
 * (public developer API) by {@link Bridge#startProfiler}; reports as JSON.
 */
final class StageProfiler extends SparkListener {
    private static final class Stage {
        long submitted, completed;
        int tasks;
        long duration, run, deserialize, resultSerialize, gettingResult, shuffleWriteNs, shuffleFetchWait,
                resultBytes, gc;
    }

    private final Map<Integer, Long> jobStart = new TreeMap<>();
    private final Map<Integer, Long> jobEnd = new TreeMap<>();
    private final Map<Integer, List<Integer>> jobStages = new TreeMap<>();
    private final Map<Integer, Stage> stages = new TreeMap<>();

    private synchronized Stage stage(int id) {
        return stages.computeIfAbsent(id, i -> new Stage());
    }

    @Override
    public synchronized void onJobStart(SparkListenerJobStart e) {
        jobStart.put(e.jobId(), e.time());
        List<Integer> ids = new ArrayList<>();
        scala.collection.Iterator<StageInfo> it = e.stageInfos().iterator();
        while (it.hasNext()) {
            ids.add(it.next().stageId());
        }
        ids.sort(null);
        jobStages.put(e.jobId(), ids);
    }

    @Override
    public synchronized void onJobEnd(SparkListenerJobEnd e) {
        jobEnd.put(e.jobId(), e.time());
    }

    @Override
    public synchronized void onStageCompleted(SparkListenerStageCompleted e) {
        StageInfo info = e.stageInfo();
        Stage s = stage(info.stageId());
        s.submitted = info.submissionTime().isDefined() ? (Long) info.submissionTime().get() : 0L;
        s.completed = info.completionTime().isDefined() ? (Long) info.completionTime().get() : 0L;
    }

    @Override
    public synchronized void onTaskEnd(SparkListenerTaskEnd e) {
        Stage s = stage(e.stageId());
        TaskInfo t = e.taskInfo();
        TaskMetrics m = e.taskMetrics();
        s.tasks++;
        s.duration += t.duration();
        s.gettingResult += t.gettingResult() ? t.finishTime() - t.gettingResultTime() : 0;
        if (m != null) {
            s.run += m.executorRunTime();
            s.deserialize += m.executorDeserializeTime();
            s.resultSerialize += m.resultSerializationTime();
            s.shuffleWriteNs += m.shuffleWriteMetrics().writeTime();
            s.shuffleFetchWait += m.shuffleReadMetrics().fetchWaitTime();
            s.resultBytes += m.resultSize();
            s.gc += m.jvmGCTime();
        }
    }

    /** One JSON object per finished job: wall ms, and per stage (in order) the summed task metrics in ms. */
    synchronized String report() {
        StringBuilder b = new StringBuilder("[");
        for (Map.Entry<Integer, Long> j : jobEnd.entrySet()) {
            Long start = jobStart.get(j.getKey());
            if (start == null) {
                continue;
            }
            if (b.length() > 1) {
                b.append(',');
            }
            b.append("{\"job\":").append(j.getKey()).append(",\"ms\":").append(j.getValue() - start)
                    .append(",\"stages\":[");
            boolean first = true;
            for (int id : jobStages.get(j.getKey())) {
                Stage s = stages.get(id);
                if (s == null || s.tasks == 0) {
                    continue;  // skipped stage
                }
                b.append(first ? "" : ",").append(String.format(
                        "{\"tasks\":%d,\"wall\":%d,\"task_duration\":%d,\"run\":%d,\"deserialize\":%d,"
                                + "\"result_serialize\":%d,\"getting_result\":%d,\"shuffle_write\":%.3f,"
                                + "\"shuffle_fetch_wait\":%d,\"result_bytes\":%d,\"gc\":%d,\"start_offset\":%d}",
                        s.tasks, s.completed - s.submitted, s.duration, s.run, s.deserialize, s.resultSerialize,
                        s.gettingResult, s.shuffleWriteNs / 1e6, s.shuffleFetchWait, s.resultBytes, s.gc,
                        s.submitted - start));
                first = false;
            }
            b.append("]}");
        }
        return b.append(']').toString();
    }
}
